//! The Rust API of an extension module of one's own kernels (the template is `examples/python_kernels`):
//! it builds the `ferrocomm` session classes into its own module ([`add_classes`]) and launches its
//! `#[kernel]`s on the session's team with the tensors of a call ([`Session::operate_with`]), so the
//! launchers' checks — length relations, team membership, buffers alive until the stream has passed the
//! kernel — hold at the Python boundary as they do in Rust.
//!
//! ```ignore
//! #[pyfunction]
//! fn scaled_put(py: Python<'_>, session: &Bound<'_, Session>, src: Arg, inbox: Arg, ...) -> PyResult<()> {
//!     session.get().operate_with(py, || format!("scaled_put of {}", src.numel), streams, |ops| {
//!         let src = ops.input::<f32>(&src, "src")?;            // any tensor: staged when not symmetric
//!         let mut inbox = ops.symmetric::<f32>(&inbox, "inbox")?; // peers store into it: must be symmetric
//!         custom_kernel::scaled_put::launch(ops.team(), cfg, &src, &mut inbox, &pad, scale)?.leave_in_stream();
//!         Ok(())
//!     })
//! }
//! ```

use std::mem::size_of;

use ferrocomm::{DeviceCopy, Error, SymBuffer, Team};
use ferrocomm_kernels::CommError;
use pyo3::prelude::*;

pub use crate::session::{Arg, Session};
use crate::session::{Inner, Place};

/// Adds the session classes and `describe` to `module`: an extension module made with them is a complete
/// `ferrocomm` back end (`ferrocomm.init(extension=module)`), with its own kernels beside the collectives.
pub fn add_classes(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<Session>()?;
    module.add_class::<crate::dlpack::DlpackExport>()?;
    module.add_function(wrap_pyfunction!(crate::describe, module)?)?;
    Ok(())
}

/// Staging buffers a call may use for tensors that are not symmetric memory.
const STAGING_SLOTS: usize = 2;

/// The tensors of one call of an extension's kernels, as their launchers take them: every one a
/// [`SymBuffer`] of the session's team, so the launcher checks it like any buffer.
pub struct Operands<'s> {
    inner: &'s mut Inner,
    /// Staging buffers taken so far.
    staged: usize,
    /// Outputs held in staging buffers, copied back into the caller's tensors after the launches.
    outputs: Vec<(SymBuffer<u8>, Place)>,
}

impl std::fmt::Debug for Operands<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operands").field("staged", &self.staged).field("outputs", &self.outputs.len()).finish()
    }
}

impl Operands<'_> {
    /// The session's team, to launch on.
    pub fn team(&self) -> &'static Team {
        self.inner.team()
    }

    /// A tensor that must be symmetric memory (a kernel's `SymSlice` / `SymSliceMut` argument, which peers
    /// address): a whole tensor of this session's `ferrocomm.empty`, typed as `T`. Anything else — an
    /// ordinary tensor, a view at an offset, another session's tensor — is [`Error::SymmetricRequired`]
    /// naming `argument`.
    pub fn symmetric<T: DeviceCopy>(&mut self, arg: &Arg, argument: &str) -> Result<SymBuffer<T>, CommError> {
        match self.inner.place(arg, size_of::<T>(), argument)? {
            // SAFETY: a typed view of the caller's symmetric tensor for this call's launches.
            Place::Symmetric(buf) => Ok(unsafe { buf.alias::<T>(arg.numel) }?),
            Place::Caller(_) => Err(Error::SymmetricRequired {
                argument: argument.to_owned(),
                found: "it is ordinary memory (or a view that does not start a ferrocomm.empty tensor, or a tensor of \
                        another session)"
                    .into(),
            }
            .into()),
        }
    }

    /// A tensor a kernel reads on its own rank only (a `&[T]` argument): used in place when it is symmetric
    /// memory, else copied into a staging buffer before the launches.
    pub fn input<T: DeviceCopy>(&mut self, arg: &Arg, argument: &str) -> Result<SymBuffer<T>, CommError> {
        let place = self.inner.place(arg, size_of::<T>(), argument)?;
        let held = self.hold(&place, arg.numel * size_of::<T>(), true)?;
        // SAFETY: a typed view of the held buffer, for this call's launches.
        Ok(unsafe { held.alias::<T>(arg.numel) }?)
    }

    /// A tensor a kernel writes on its own rank only (a `&mut [T]` argument): used in place when it is
    /// symmetric memory, else a staging buffer filled from it (a `&mut [T]` may be read, or written in part)
    /// and copied back into it after the launches.
    pub fn output<T: DeviceCopy>(&mut self, arg: &Arg, argument: &str) -> Result<SymBuffer<T>, CommError> {
        let place = self.inner.place(arg, size_of::<T>(), argument)?;
        let held = self.hold(&place, arg.numel * size_of::<T>(), true)?;
        // SAFETY: as in `input`.
        let typed = unsafe { held.alias::<T>(arg.numel) }?;
        self.outputs.push((held, place));
        Ok(typed)
    }

    fn hold(&mut self, place: &Place, bytes: usize, fill: bool) -> Result<SymBuffer<u8>, CommError> {
        if let Place::Caller(_) = place {
            if self.staged == STAGING_SLOTS {
                return Err(CommError::TooLarge {
                    what: "ordinary tensors in one call (each is copied through a staging buffer)",
                    bytes: self.staged + 1,
                    max: STAGING_SLOTS,
                    fix: "pass the others as symmetric memory (ferrocomm.empty)",
                });
            }
            self.staged += 1;
        }
        self.inner.hold(place, bytes, self.staged.saturating_sub(1), fill)
    }

    /// Copies the staged outputs back into the caller's tensors, after the launches.
    fn finish(self) -> Result<(), CommError> {
        for (held, place) in &self.outputs {
            self.inner.give_back(held, place)?;
        }
        Ok(())
    }
}

impl Session {
    /// Runs `f` with the session's team: how an extension allocates what its kernels need besides the
    /// call's tensors (signal pads, scratch), once per session.
    pub fn with_team<R>(&self, py: Python<'_>, f: impl FnOnce(&'static Team) -> Result<R, Error>) -> PyResult<R> {
        self.with(py, |inner| f(inner.team()).map_err(|e| crate::errors::runtime(py, e)))
    }

    /// One call of an extension's kernels: reports earlier device errors, checks that the processes agree on
    /// `call()` (a statement of the kernel and its sizes, made only when the session checks calls), binds the caller's `streams` (torch's
    /// current ones; `None` on the emulator, which then waits for the result), gives `f` the call's tensors
    /// as buffers of the team, and copies staged outputs back after `f`'s launches. `f` leaves its launch
    /// guards in the stream ([`ferrocomm::LaunchGuard::leave_in_stream`]): the team waits for them before the
    /// host next touches its memory, and frees nothing a queued kernel still uses.
    pub fn operate_with(
        &self,
        py: Python<'_>,
        call: impl FnOnce() -> String,
        streams: Option<Vec<usize>>,
        f: impl FnOnce(&mut Operands<'_>) -> Result<(), CommError>,
    ) -> PyResult<()> {
        self.operate(py, call, streams, |inner| {
            let mut ops = Operands { inner, staged: 0, outputs: Vec::new() };
            f(&mut ops)?;
            ops.finish()
        })
    }
}

/// A typed Rust error as its Python exception (for an extension's own checks).
pub fn to_py_err(py: Python<'_>, e: CommError) -> PyErr {
    crate::errors::comm(py, e)
}
