//! Symmetric memory across processes: this process allocates its rank's part shareable, every rank
//! checks that all are allocating the same thing, the parts' descriptors are exchanged over the host's
//! Unix-socket mesh, and each process maps its peers' parts. The peer tables then hold the mapped
//! addresses, so kernels store to a peer's part exactly as in a team of one process.

use super::{Part, TeamShared};
use crate::error::Error;
use crate::process::ProcessGroup;

/// The parts of a new symmetric allocation of `bytes` per rank, `label` naming it (e.g. `SymBuffer<f32>`):
/// this rank's own, and every peer's mapped here. Fails on every rank alike when the ranks disagree.
pub(crate) fn allocate(team: &TeamShared, group: &ProcessGroup, bytes: usize, label: &str) -> Result<Vec<Part>, Error> {
    let number = group.next_allocation();
    group.agree("a symmetric allocation", &format!("allocation #{number}: {label} ({bytes} bytes per rank)"))?;
    let rank = group.rank();
    let slot = team.slot(rank)?;
    let own = team.exec.alloc(slot, bytes)?;
    let mut parts = Parts { team, slot, list: Vec::with_capacity(group.world()), own: Some(own), bytes };
    let fd = team.exec.export(slot, own, bytes)?;
    let tag = number.to_le_bytes();
    let received = group.exchange_fds("a symmetric allocation", std::os::fd::AsFd::as_fd(&fd), &tag)?;
    drop(fd);
    for (peer, fd) in received.into_iter().enumerate() {
        let part = match fd {
            None if peer == rank => Part::Own(own),
            Some(fd) => Part::Mapped(team.exec.import(slot, std::os::fd::AsFd::as_fd(&fd), bytes)?),
            None => {
                return Err(Error::TeamConfig {
                    reason: format!("rank {peer} sent no memory handle for allocation #{number}"),
                });
            }
        };
        parts.list.push(part);
    }
    parts.own = None;
    Ok(std::mem::take(&mut parts.list))
}

/// The parts made so far, released if the allocation fails half-way.
struct Parts<'a> {
    team: &'a TeamShared,
    slot: usize,
    list: Vec<Part>,
    /// This rank's part, until the list owns it.
    own: Option<u64>,
    bytes: usize,
}

impl Drop for Parts<'_> {
    fn drop(&mut self) {
        for part in self.list.drain(..) {
            if let Part::Mapped(addr) = part {
                // SAFETY: mapped above for this slot with these bytes, and not handed out.
                let _ = unsafe { self.team.exec.unmap(self.slot, addr, self.bytes) };
            }
        }
        if let Some(addr) = self.own.take() {
            // SAFETY: allocated above for this slot with these bytes, and not handed out.
            let _ = unsafe { self.team.exec.free(self.slot, addr, self.bytes) };
        }
    }
}
