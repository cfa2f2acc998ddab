//! Where a rank's work on the caller's streams ends: one event per caller stream, recorded after each
//! launch or copy the rank queues there. A wait on the team polls these events, not the caller's stream:
//! the caller keeps queuing its own work behind ours, which the team must not wait for.

use std::sync::{Mutex, PoisonError};

use cudarc::driver::sys::{self, CUresult};
use cudarc::driver::{DriverError, result};

use crate::exec::ExternalStream;

/// One caller stream's event.
#[derive(Debug)]
struct Mark {
    stream: usize,
    event: sys::CUevent,
    /// Recorded, and not yet seen complete.
    pending: bool,
}

/// A rank's marks. The newest record on a stream covers the older ones (a stream runs in order), so each
/// stream has one event, recorded again for each new piece of work.
#[derive(Debug, Default)]
pub(crate) struct Marks(Mutex<Vec<Mark>>);

// SAFETY: events are driver handles usable from any thread with their context current (every use follows
// `CudaTeam::bind`); the list is behind a mutex.
unsafe impl Send for Marks {}
// SAFETY: as above.
unsafe impl Sync for Marks {}

impl Marks {
    /// Records the end of the work just queued on `stream` (the rank's context is current).
    pub fn record(&self, stream: &ExternalStream) -> Result<(), DriverError> {
        let mut marks = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let at = match marks.iter().position(|m| m.stream == stream.id()) {
            Some(at) => at,
            None => {
                // Timing off: the cheapest event to record and to query.
                let event = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?;
                marks.push(Mark { stream: stream.id(), event, pending: false });
                marks.len() - 1
            }
        };
        // SAFETY: a live event of the current context, and a live stream of that context (the binding's
        // contract).
        unsafe { result::event::record(marks[at].event, stream.as_raw()) }?;
        marks[at].pending = true;
        Ok(())
    }

    /// Whether every recorded event has completed (never blocks).
    pub fn passed(&self) -> Result<bool, DriverError> {
        let mut marks = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        for mark in marks.iter_mut().filter(|m| m.pending) {
            // SAFETY: a live event of the current context.
            match unsafe { sys::cuEventQuery(mark.event) } {
                CUresult::CUDA_SUCCESS => mark.pending = false,
                CUresult::CUDA_ERROR_NOT_READY => return Ok(false),
                other => return Err(DriverError(other)),
            }
        }
        Ok(true)
    }
}

impl Drop for Marks {
    fn drop(&mut self) {
        for mark in self.0.get_mut().unwrap_or_else(PoisonError::into_inner).drain(..) {
            // SAFETY: created by `record`, destroyed once; the rank's context outlives its ranks' fields
            // (`CudaTeam`'s field order), and destroying an event still pending is allowed.
            let _ = unsafe { result::event::destroy(mark.event) };
        }
    }
}
