//! `ferrocomm._C`: the extension module of the `ferrocomm` Python package. The Python layer (`python/ferrocomm`)
//! turns torch tensors and numpy arrays into the addresses and sizes these functions take, registers the
//! collectives as torch ops, and defines the exception classes the errors become.
//!
//! | module | what |
//! | --- | --- |
//! | `session` | [`session::Session`]: the team, its communicator, symmetric memory and the collectives |
//! | `dlpack` | symmetric memory exported through DLPack (dlpark); any DLPack producer described |
//! | `errors` | every typed Rust error as a Python exception of its own class |
//! | [`extension`] | the Rust API of an extension module of one's own kernels (`examples/python_kernels`) |

mod dlpack;
mod errors;
pub mod extension;
mod session;

pub use extension::{Arg, Operands, Session, add_classes};

use pyo3::prelude::*;

/// Describes a DLPack producer (a numpy array, a CPU or CUDA tensor): `(address, numel, dtype, cuda)`,
/// `dtype` as numpy names it (`"float32"`, `"bfloat16"`, `"int64"`), `cuda` the GPU ordinal or `None` for
/// the CPU. Refuses a non-contiguous one.
#[pyfunction]
fn describe(py: Python<'_>, object: &Bound<'_, PyAny>, argument: &str) -> PyResult<(u64, usize, String, Option<i32>)> {
    let d = dlpack::describe(py, object, argument)?;
    Ok((d.addr, d.numel, d.dtype, d.cuda))
}

#[pymodule]
#[pyo3(name = "_C")]
fn ferrocomm_extension(m: &Bound<'_, PyModule>) -> PyResult<()> {
    add_classes(m)
}
