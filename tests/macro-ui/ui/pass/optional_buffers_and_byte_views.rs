// Optional buffers (`None` reaches the kernel as `None`, `Some` of an empty buffer as `Some`), byte views
// of buffers of any element type, and `requires(...)` relations with arithmetic, `world()`, scalars and
// fields, launched on a two-rank emulated team.
#![deny(warnings)]
use ferrocomm::{ByteView, Error, KernelModule, LaunchConfig, SymBuffer, Team};
use ferrocomm_device::kernel;
use ferrocomm_device::prelude::*;

static __FERROCOMM_MODULE: KernelModule = KernelModule::new("ui", &[]);

/// Writes into `out[0]` what it was given: 1 for `None`, 2 + the length for `Some`.
#[kernel(no_wait)]
pub fn which(probe: Option<&[u32]>, sym: Option<SymSliceMut<u32>>, out: &mut [u32]) {
    if global_thread_idx() == 0 {
        out[0] = probe.map_or(1, |p| 2 + p.len() as u32);
        out[1] = sym.map_or(1, |s| 2 + s.len() as u32);
    }
}

/// Copies this rank's bytes of `src` into slot `rank` of every rank's `dst` (an all-gather of bytes).
#[kernel(no_wait, bytes(src, dst), requires(len(dst) >= world() * len(src)))]
pub fn gather_bytes(src: &[u8], dst: SymSliceMut<u8>) {
    let (rank, world) = (team::rank(), team::world());
    if global_thread_idx() == 0 {
        for peer in 0..world {
            let slot = dst.peer(peer).slice(rank as usize * src.len(), src.len());
            for (i, &b) in src.iter().enumerate() {
                // SAFETY: byte `i` of the slot (the slice checked its bounds); only this thread writes it.
                unsafe { slot.write(i, b) };
            }
        }
    }
}

/// A by-value description the relations read fields of.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Plan {
    pub rows: u64,
    pub row_len: u32,
}

// SAFETY: a `#[repr(C)]` struct of integers, passed as itself.
unsafe impl ferrocomm_device::DeviceParam for Plan {
    type Abi = Plan;
    unsafe fn from_abi(abi: Plan) -> Plan {
        abi
    }
}

impl ferrocomm::LaunchParam for Plan {
    type Host<'a> = Plan;
    fn lower(host: &Plan, _rank: &ferrocomm::RankRef<'_>) -> Result<Plan, Error> {
        Ok(*host)
    }
}

/// Needs `rows * row_len` elements and a whole number of 4-element groups.
#[kernel(no_wait, requires(len(data) == plan.rows * plan.row_len, len(data) % 4 == 0, len(data) / (extra + 1) > 0))]
pub fn shaped(data: &mut [u32], plan: Plan, extra: u32) {
    if global_thread_idx() == 0 {
        data[0] = plan.row_len + extra;
    }
}

fn requirement(r: Result<ferrocomm::LaunchGuard<'_>, Error>) -> (&'static str, &'static str, String) {
    match r {
        Err(Error::Requirement { argument, relation, values, .. }) => (argument, relation, values),
        other => panic!("expected a requirement error, got {:?}", other.map(|_| ())),
    }
}

fn main() -> Result<(), Error> {
    let team = Team::emulated(2)?;
    let mut out = SymBuffer::<u32>::new(&team, 2)?;
    which::launch(&team, LaunchConfig::single(), None, None, &mut out)?.wait()?;
    assert_eq!(out.to_host(0)?, [1, 1]);
    let empty = SymBuffer::<u32>::new(&team, 0)?;
    let mut sym = SymBuffer::<u32>::new(&team, 3)?;
    which::launch(&team, LaunchConfig::single(), Some(&empty), Some(&mut sym), &mut out)?.wait()?;
    assert_eq!(out.to_host(1)?, [2, 5]);

    // f32s travel as their bytes.
    let mut mine = SymBuffer::<f32>::new(&team, 2)?;
    mine.copy_from_host(0, &[1.0, 2.0])?;
    mine.copy_from_host(1, &[3.0, 4.0])?;
    let mut all = SymBuffer::<f32>::new(&team, 4)?;
    let view: ByteView<'_> = mine.bytes();
    assert_eq!(view.len(), 8);
    gather_bytes::launch(&team, LaunchConfig::single(), view, all.bytes_mut())?.wait()?;
    assert_eq!(all.to_host(0)?, [1.0, 2.0, 3.0, 4.0]);
    assert_eq!(all.to_host(1)?, [1.0, 2.0, 3.0, 4.0]);

    // A relation over bytes, `world()` and a product: 12 bytes of room for 2 ranks x 8 bytes.
    let mut small = SymBuffer::<f32>::new(&team, 3)?;
    let (argument, relation, values) =
        requirement(gather_bytes::launch(&team, LaunchConfig::single(), mine.bytes(), small.bytes_mut()));
    assert_eq!((argument, relation), ("dst", "len(dst) >= world() * len(src)"));
    assert_eq!(values, "len(dst) = 12, world() = 2, len(src) = 8; 12 >= 16");

    let mut data = SymBuffer::<u32>::new(&team, 8)?;
    shaped::launch(&team, LaunchConfig::single(), &mut data, Plan { rows: 2, row_len: 4 }, 0)?.wait()?;
    let (_, relation, values) =
        requirement(shaped::launch(&team, LaunchConfig::single(), &mut data, Plan { rows: 3, row_len: 4 }, 0));
    assert_eq!(relation, "len(data) == plan.rows * plan.row_len");
    assert_eq!(values, "len(data) = 8, plan.rows = 3, plan.row_len = 4; 8 == 12");
    // Division truncates, as in Rust; the arithmetic is `i128`, so `extra + 1` does not wrap.
    let (_, relation, values) =
        requirement(shaped::launch(&team, LaunchConfig::single(), &mut data, Plan { rows: 2, row_len: 4 }, u32::MAX));
    assert_eq!(relation, "len(data) / (extra + 1) > 0");
    assert_eq!(values, "len(data) = 8, extra = 4294967295; 0 > 0");
    Ok(())
}
