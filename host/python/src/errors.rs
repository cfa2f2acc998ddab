//! Every typed Rust error becomes an exception of its own class (`ferrocomm.errors`), with the Rust message
//! and the fields a handler needs (`rank`, `argument`).

use ferrocomm::Error;
use ferrocomm_bootstrap::BootstrapError;
use ferrocomm_kernels::CommError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The Python exception class (by name, in `ferrocomm.errors`) of a runtime error, and its rank if one rank
/// is to blame.
fn class_of(e: &Error) -> (&'static str, Option<usize>) {
    match e {
        Error::Device(errors) => {
            let first = errors.first();
            let class = match first.kind_name() {
                "timeout" | "aborted wait" | "unraised signal" => "DeviceTimeoutError",
                "panic" => "KernelPanicError",
                _ => "DeviceError",
            };
            (class, Some(first.rank()))
        }
        Error::HostTimeout { rank, .. } => ("HostTimeoutError", Some(*rank)),
        Error::Poisoned => ("HostTimeoutError", None),
        Error::Disagreement { .. } => ("DisagreementError", None),
        Error::PeersExited { exited, .. } => ("PeersExitedError", exited.first().copied()),
        Error::ForeignBuffer { .. } | Error::NotSymmetric { .. } | Error::ForeignStream { .. } => {
            ("ForeignBufferError", None)
        }
        Error::WrongDevice { rank, .. } | Error::CallerMemory { rank, .. } | Error::NotLocal { rank, .. } => {
            ("ForeignBufferError", Some(*rank))
        }
        Error::SymmetricRequired { .. } => ("SymmetricRequiredError", None),
        Error::LengthMismatch { .. }
        | Error::Requirement { .. }
        | Error::BadLaunchConfig { .. }
        | Error::NotCoResident { .. }
        | Error::SizeOverflow { .. }
        | Error::RankOutOfRange { .. } => ("RequirementError", None),
        Error::Capturing { .. } => ("CapturingError", None),
        Error::Unsupported { .. } => ("UnsupportedError", None),
        Error::Cuda { .. } | Error::PtxLoad { .. } | Error::KernelNotFound { .. } => ("CudaError", None),
        Error::NoDriver | Error::NoGpu | Error::NoSuchGpu { .. } | Error::DriverTooOld { .. } => ("NoGpuError", None),
        Error::Bootstrap(b) => match b {
            BootstrapError::PeerLost { rank, .. } => ("PeersExitedError", Some(*rank)),
            BootstrapError::NeverJoined { missing, .. } | BootstrapError::Timeout { missing, .. } => {
                ("PeersExitedError", missing.first().copied())
            }
            BootstrapError::Diverged { rank, .. } => ("DisagreementError", Some(*rank)),
            _ => ("ConfigError", None),
        },
        Error::TeamConfig { .. } | Error::BadEnv { .. } | Error::NoGpuForRank { .. } => ("ConfigError", None),
        _ => ("FerrocommError", None),
    }
}

/// The argument a runtime error names, if any.
fn argument_of(e: &Error) -> Option<String> {
    match e {
        Error::Requirement { argument, .. } => Some((*argument).to_owned()),
        Error::ForeignBuffer { argument, .. } => argument.map(str::to_owned),
        Error::SymmetricRequired { argument, .. } => Some(argument.clone()),
        _ => None,
    }
}

/// Raises `class` (a name in `ferrocomm.errors`) with `message`, `rank` and `argument`.
pub fn raise(py: Python<'_>, class: &str, message: String, rank: Option<usize>, argument: Option<String>) -> PyErr {
    let made = (|| -> PyResult<PyErr> {
        let class = py.import("ferrocomm.errors")?.getattr(class)?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("rank", rank)?;
        kwargs.set_item("argument", argument)?;
        let exception = class.call((message,), Some(&kwargs))?;
        Ok(PyErr::from_value(exception))
    })();
    made.unwrap_or_else(|e| e)
}

/// A runtime error as its Python exception.
pub fn runtime(py: Python<'_>, e: Error) -> PyErr {
    let (class, rank) = class_of(&e);
    let argument = argument_of(&e);
    raise(py, class, e.to_string(), rank, argument)
}

/// A collective's error as its Python exception.
pub fn comm(py: Python<'_>, e: CommError) -> PyErr {
    match e {
        CommError::Runtime(e) => runtime(py, e),
        CommError::RankOutOfRange { what, .. } => raise(py, "RequirementError", e.to_string(), None, Some(what.into())),
        other => raise(py, "RequirementError", other.to_string(), None, None),
    }
}

/// Bad input found at the Python boundary: `class` names what is wrong, `argument` which argument.
pub fn input(py: Python<'_>, class: &str, argument: &str, message: String) -> PyErr {
    raise(py, class, format!("argument `{argument}`: {message}"), None, Some(argument.to_owned()))
}
