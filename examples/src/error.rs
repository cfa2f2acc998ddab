//! [`ExampleError`]: why an example failed — the library or runtime failed, a result differs from the CPU
//! reference, or an argument is unusable — and the comparison that finds differences.

use std::fmt::Debug;

use ferrocomm_kernels::CommError;

/// Why an example failed. The examples print it and exit with status 1.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExampleError {
    /// A collective, a launch or the runtime under them failed (device errors included).
    #[error(transparent)]
    Comm(#[from] CommError),
    /// A rank holds a value that differs from the CPU reference.
    #[error("verification failed: {what}: rank {rank}, element {index}: expected {expected}, found {found}")]
    Mismatch {
        /// What was checked, with its parameters.
        what: String,
        /// The rank holding the wrong value.
        rank: usize,
        /// The element's index in that rank's buffer.
        index: usize,
        /// The reference value.
        expected: String,
        /// The value found.
        found: String,
    },
    /// A library check found a rank holding a value that differs from the CPU reference (a check that could
    /// not run is [`Comm`](Self::Comm)).
    #[error("verification failed: {0}")]
    Verify(ferrocomm_kernels::verify::VerifyError),
    /// NCCL failed.
    #[error("NCCL: {what}: {message}")]
    Nccl {
        /// What was being done.
        what: String,
        /// NCCL's message.
        message: String,
    },
    /// An argument the example cannot run with.
    #[error("{0}")]
    BadArgument(String),
}

impl From<ferrocomm_kernels::verify::VerifyError> for ExampleError {
    /// A check that failed to run (a bad shape, a device timeout) is that error, not a verification failure.
    fn from(e: ferrocomm_kernels::verify::VerifyError) -> Self {
        match e {
            ferrocomm_kernels::verify::VerifyError::Comm(e) => ExampleError::Comm(e),
            mismatch => ExampleError::Verify(mismatch),
        }
    }
}

impl From<ferrocomm::Error> for ExampleError {
    fn from(e: ferrocomm::Error) -> Self {
        ExampleError::Comm(CommError::Runtime(e))
    }
}

/// Compares what `rank` holds with the reference, naming the first differing element.
pub fn check_equal<T: PartialEq + Debug>(
    what: &str,
    rank: usize,
    expected: &[T],
    found: &[T],
) -> Result<(), ExampleError> {
    let mismatch = |index: usize, expected: String, found: String| ExampleError::Mismatch {
        what: what.to_owned(),
        rank,
        index,
        expected,
        found,
    };
    if expected.len() != found.len() {
        let index = expected.len().min(found.len());
        return Err(mismatch(index, format!("{} elements", expected.len()), format!("{} elements", found.len())));
    }
    match expected.iter().zip(found).position(|(e, f)| e != f) {
        None => Ok(()),
        Some(i) => Err(mismatch(i, format!("{:?}", expected[i]), format!("{:?}", found[i]))),
    }
}
