//! `ferrocomm._C`: the extension module of the `ferrocomm` Python package. The Python layer (`python/ferrocomm`)
//! turns torch tensors and numpy arrays into the addresses and sizes these functions take, registers the
//! collectives as torch ops, and defines the exception classes the errors become.
//!
//! | module | what |
//! | --- | --- |
//! | `session` | [`session::Session`]: the team, its communicator, symmetric memory and the collectives |
//! | `dlpack` | symmetric memory exported through DLPack (dlpark); any DLPack producer described |
//! | `errors` | every typed Rust error as a Python exception of its own class |

mod dlpack;
mod errors;
mod session;

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
fn extension(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<session::Session>()?;
    m.add_class::<dlpack::DlpackExport>()?;
    m.add_function(wrap_pyfunction!(describe, m)?)?;
    Ok(())
}
