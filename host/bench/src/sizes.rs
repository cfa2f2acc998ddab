//! Message sizes: parsing ("64KiB", "8B..1GiB", "1KiB..1MiB:4", "8,64KiB,1MiB") and printing.
//!
//! Units are binary whatever the spelling (K = KB = KiB = 1024), as in nccl-tests' `-b 8 -e 128M`.

use thiserror::Error;

/// Sizes for people, as the runtime writes them in its messages.
pub use ferrocomm::size::format_size;

/// The largest size the tool accepts (1 TiB): anything above is a typo, not a benchmark.
pub const MAX_SIZE: u64 = 1 << 40;

/// A size list that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum SizeError {
    /// Nothing where a size was expected.
    #[error("empty size in {0:?}: write sizes like 8B, 64KiB, 1MiB, ranges like 8B..1GiB, lists like 8,64KiB")]
    Empty(String),
    /// A number that does not parse or a unit the tool does not know.
    #[error("cannot read size {0:?}: write a whole number with an optional unit B, KiB, MiB, GiB, TiB (e.g. 64KiB)")]
    Invalid(String),
    /// Zero bytes.
    #[error("size {0:?} is zero: the smallest message is 1 byte")]
    Zero(String),
    /// Above [`MAX_SIZE`].
    #[error("size {0:?} is above 1 TiB: check the unit")]
    TooLarge(String),
    /// A range whose start is above its end.
    #[error("range {0:?} runs backwards: write the smaller size first (e.g. 8B..1GiB)")]
    Backwards(String),
    /// A range step that is not a whole factor of at least 2.
    #[error("range step in {0:?} must be a whole factor of at least 2 (e.g. 8B..1GiB:4)")]
    BadStep(String),
}

/// Reads one size of the bench: [`ferrocomm::size::parse_size`]'s forms, not zero and at most
/// [`MAX_SIZE`].
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let bytes = ferrocomm::size::parse_size(text).map_err(|e| match e {
        ferrocomm::size::SizeError::Empty(t) => SizeError::Empty(t),
        ferrocomm::size::SizeError::Invalid(t) => SizeError::Invalid(t),
        ferrocomm::size::SizeError::TooLarge(t) => SizeError::TooLarge(t),
    })?;
    match bytes {
        0 => Err(SizeError::Zero(text.to_owned())),
        b if b > MAX_SIZE => Err(SizeError::TooLarge(text.to_owned())),
        b => Ok(b),
    }
}

/// Reads a comma-separated list of sizes and ranges, sorted and without duplicates.
///
/// A range `A..B` runs from `A` doubling up to `B` (included when reached); `A..B:N` multiplies by `N`.
/// `8B..1GiB` is the 28 powers of two from 8 bytes to 1 GiB.
pub fn parse_sizes(text: &str) -> Result<Vec<u64>, SizeError> {
    let mut sizes = Vec::new();
    for item in text.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err(SizeError::Empty(text.to_owned()));
        }
        match item.split_once("..") {
            None => sizes.push(parse_size(item)?),
            Some((start, rest)) => {
                let (end, step) = match rest.split_once(':') {
                    None => (rest, 2),
                    Some((end, step)) => {
                        let step = step.trim().trim_start_matches(['x', 'X', '*']);
                        match step.parse::<u64>() {
                            Ok(s) if s >= 2 => (end, s),
                            _ => return Err(SizeError::BadStep(item.to_owned())),
                        }
                    }
                };
                let (start, end) = (parse_size(start)?, parse_size(end)?);
                if start > end {
                    return Err(SizeError::Backwards(item.to_owned()));
                }
                let mut size = start;
                while size <= end {
                    sizes.push(size);
                    size = match size.checked_mul(step) {
                        Some(next) => next,
                        None => break,
                    };
                }
            }
        }
    }
    sizes.sort_unstable();
    sizes.dedup();
    Ok(sizes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_sizes() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("8B"), Ok(8));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("64k"), Ok(65536));
        assert_eq!(parse_size(" 1 MiB "), Ok(1 << 20));
        assert_eq!(parse_size("1GB"), Ok(1 << 30));
        assert_eq!(parse_size("1_024"), Ok(1024));
        assert!(matches!(parse_size("0"), Err(SizeError::Zero(_))));
        assert!(matches!(parse_size("2TiB"), Err(SizeError::TooLarge(_))));
        assert!(matches!(parse_size("99999999999999999999"), Err(SizeError::TooLarge(_))));
        assert!(matches!(parse_size("1.5MiB"), Err(SizeError::Invalid(_))));
        assert!(matches!(parse_size("MiB"), Err(SizeError::Invalid(_))));
        assert!(matches!(parse_size("12 furlongs"), Err(SizeError::Invalid(_))));
    }

    #[test]
    fn ranges_and_lists() {
        let all = parse_sizes("8B..1GiB").unwrap();
        assert_eq!(all.len(), 28);
        assert_eq!((all[0], all[27]), (8, 1 << 30));
        assert!(all.windows(2).all(|w| w[1] == 2 * w[0]));
        assert_eq!(parse_sizes("1KiB..1MiB:4").unwrap(), vec![1024, 4096, 16384, 65536, 262144, 1 << 20]);
        assert_eq!(parse_sizes("3..20").unwrap(), vec![3, 6, 12]);
        assert_eq!(parse_sizes("1MiB, 8, 64KiB,8").unwrap(), vec![8, 65536, 1 << 20]);
        assert_eq!(parse_sizes("8..8").unwrap(), vec![8]);
        assert!(matches!(parse_sizes("1MiB..8"), Err(SizeError::Backwards(_))));
        assert!(matches!(parse_sizes("8..64:1"), Err(SizeError::BadStep(_))));
        assert!(matches!(parse_sizes("8,,16"), Err(SizeError::Empty(_))));
        assert!(matches!(parse_sizes("8..1TiB:x1024"), Ok(v) if v.len() == 4));
    }

    #[test]
    fn formatting() {
        assert_eq!(format_size(8), "8 B");
        assert_eq!(format_size(1023), "1023 B");
        assert_eq!(format_size(65536), "64 KiB");
        assert_eq!(format_size(14336), "14 KiB");
        assert_eq!(format_size(1536 * 1024), "1.5 MiB");
        assert_eq!(format_size(1 << 30), "1 GiB");
        for size in parse_sizes("8..1GiB").unwrap() {
            assert_eq!(parse_size(&format_size(size).replace(' ', "")), Ok(size));
        }
    }
}
