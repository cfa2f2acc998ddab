//! Statistics over timed trials: median with min and max, and how many operations a trial runs.

use thiserror::Error;

/// No statistic can be drawn.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum StatsError {
    /// No finite sample (no trial ran, or every trial produced NaN or infinity).
    #[error("no finite timing sample: every trial failed to produce a time")]
    NoSamples,
}

/// Median, minimum and maximum of a set of samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// The middle value (mean of the two middle values for an even count).
    pub median: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
    /// How many samples went in (non-finite ones are left out).
    pub count: usize,
}

impl Summary {
    /// Summarises `samples`, leaving out NaN and infinities (a broken timer must not move the median).
    pub fn of(samples: &[f64]) -> Result<Summary, StatsError> {
        let mut sorted: Vec<f64> = samples.iter().copied().filter(|s| s.is_finite()).collect();
        if sorted.is_empty() {
            return Err(StatsError::NoSamples);
        }
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 };
        Ok(Summary { median, min: sorted[0], max: sorted[n - 1], count: n })
    }
}

/// Operations per timed trial at `bytes`: `iters`, fewer for large messages so that one trial moves about
/// `max_bytes_per_trial` (a 1 GiB all-reduce 100 times per trial would take seconds), never fewer than
/// `min_iters` (nor than 1).
pub fn iterations_for(bytes: u64, iters: u64, max_bytes_per_trial: u64, min_iters: u64) -> u64 {
    let by_volume = max_bytes_per_trial.div_ceil(bytes.max(1));
    iters.min(by_volume).max(min_iters).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn median_odd_even_and_outliers() {
        let s = Summary::of(&[5.0, 1.0, 3.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.count), (3.0, 1.0, 5.0, 3));
        assert_eq!(Summary::of(&[4.0, 1.0, 3.0, 2.0]).unwrap().median, 2.5);
        // One wild trial moves the max, not the median.
        let s = Summary::of(&[2.0, 2.1, 1.9, 2.0, 500.0]).unwrap();
        assert_eq!((s.median, s.max), (2.0, 500.0));
        assert_eq!(Summary::of(&[7.5]).unwrap().median, 7.5);
    }

    #[test]
    fn non_finite_samples_are_left_out() {
        let s = Summary::of(&[f64::NAN, 3.0, f64::INFINITY, 1.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.count), (2.0, 1.0, 3.0, 2));
        assert_eq!(Summary::of(&[]), Err(StatsError::NoSamples));
        assert_eq!(Summary::of(&[f64::NAN]), Err(StatsError::NoSamples));
    }

    #[test]
    fn iterations_shrink_for_large_messages() {
        let cap = 8 << 30;
        assert_eq!(iterations_for(8, 100, cap, 2), 100);
        assert_eq!(iterations_for(64 << 20, 100, cap, 2), 100);
        assert_eq!(iterations_for(256 << 20, 100, cap, 2), 32);
        assert_eq!(iterations_for(1 << 30, 100, cap, 2), 8);
        assert_eq!(iterations_for(1 << 40, 100, cap, 2), 2);
        assert_eq!(iterations_for(8, 0, cap, 0), 1);
    }

    proptest! {
        #[test]
        fn summary_is_ordered_and_order_free(mut v in prop::collection::vec(-1e9f64..1e9, 1..64)) {
            let s = Summary::of(&v).unwrap();
            prop_assert!(s.min <= s.median && s.median <= s.max);
            prop_assert_eq!(s.count, v.len());
            prop_assert!(v.iter().all(|x| s.min <= *x && *x <= s.max));
            // As many samples at or below the median as at or above it.
            let below = v.iter().filter(|x| **x <= s.median).count();
            let above = v.iter().filter(|x| **x >= s.median).count();
            prop_assert!(2 * below >= v.len() && 2 * above >= v.len());
            v.reverse();
            prop_assert_eq!(Summary::of(&v).unwrap(), s);
        }
    }
}
