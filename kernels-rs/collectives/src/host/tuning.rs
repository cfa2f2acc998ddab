//! [`Tuning`]: grid sizes, algorithm thresholds and buffer capacities, with defaults for the GPUs a team
//! runs on (sized from their SM count) and for the CPU emulator (tiny grids, tiny buffers, so its tests run
//! every path — segmented two-shot included — in little time).

use ferrocomm::size::parse_size;
use ferrocomm::{Backend, Device, Team};

use super::CommError;
use crate::layout::{MAX_BLOCKS, MAX_WORLD, VECTOR_BYTES};
use ferrocomm_device::bulk::{BULK_STAGES, bulk_staging_bytes};

/// How the collectives size their grids and choose their algorithms. Every field may be changed before
/// [`Communicator::with_tuning`](super::Communicator::with_tuning); the defaults come from
/// [`Tuning::for_team`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tuning {
    /// Threads per block of the bandwidth kernels (one-shot and two-shot all-reduce, staged and direct
    /// exchange): a multiple of 32; the two-shot uses fewer where its registers allow fewer.
    pub threads: u32,
    /// Threads per block of the LL kernels (LL all-reduce, LL exchange): a multiple of 32.
    pub ll_threads: u32,
    /// Most blocks per rank of any kernel that waits (all of them): at most the SMs a rank may use, so the
    /// grid is co-resident, and at most [`MAX_BLOCKS`].
    pub max_blocks: u32,
    /// Blocks of put and get (the bandwidth target is met with at most 32 SMs).
    pub put_blocks: u32,
    /// Threads per block of put and get: with few blocks, many threads keep enough loads in flight.
    pub put_threads: u32,
    /// 16-byte vectors each thread of a bandwidth kernel should move before the grid grows by a block.
    pub vectors_per_thread: u32,
    /// The same for the latency kernels (LL all-reduce, one-shot push, LL exchange): fewer vectors per
    /// thread spread a message over more SMs, which shortens each block's release.
    pub ll_vectors_per_thread: u32,
    /// All-reduce messages of at most this many bytes use the LL one-shot.
    pub ll_all_reduce_max_bytes: usize,
    /// All-reduce messages above the LL limit and up to this many bytes use the one-shot push (it stages
    /// `2 * world` copies of this size per rank); larger ones the two-shot.
    pub one_shot_max_bytes: usize,
    /// Broadcast, all-gather and all-to-all messages (per destination) of at most this many bytes travel
    /// as LL packets; larger ones by direct stores.
    pub ll_exchange_max_bytes: usize,
    /// Two-shot scratch per rank, in bytes: `world` slots; larger messages run in several segments.
    pub scratch_bytes: usize,
    /// Bytes of each stage of the TMA staging ring a block of put, get, the direct exchange and the
    /// two-shot copies through (four stages per block, in dynamic shared memory; a multiple of 16). 0 turns the TMA off:
    /// every copy uses loads and stores. Off on GPUs older than sm_90, which have no TMA.
    pub bulk_stage_bytes: usize,
    /// Put and get messages, direct-exchange messages per destination and two-shot chunks (a rank's share
    /// of the message) of at least this many bytes copy through the TMA; smaller ones with loads and stores.
    pub bulk_min_bytes: usize,
    /// Blocks per multiprocessor a rank may use (`max_blocks` of them) that the tensor-parallel GEMV's plan
    /// fills at most, in one wave: on GPUs the 3 its launch bounds keep resident (`TP_RESIDENT_BLOCKS_PER_SM`;
    /// the fused step never plans more).
    pub tp_blocks_per_sm: u32,
    /// Decode steps of at least this many tokens run the tensor-parallel GEMV with two warps sharing each
    /// range of rows (`TpPlan::row_groups` 2, where the wave holds as many blocks as with one), which
    /// halves the split-K partial sums the epilogues read back; a value past `TP_MAX_TOKENS` never does.
    /// On GPUs 4, measured on an H200 shared by two ranks (H = K = 8192, an instance per count, two rounds
    /// each): two groups ran the two-kernel step 0.3 / 0.5 / 0.9 / 0.9 µs faster at 1 / 2 / 4 / 8 tokens and
    /// the fused one 0.1–0.4 µs slower at 1 and 2 tokens, 0.3 / 0.7 µs faster at 4 / 8 (the GEMV alone, with
    /// no epilogue to read the sums, 0.4–0.9 µs slower); at 16 tokens they took 4 µs off the
    /// two-kernel step and 2 off the fused one. At H = K = 7168 the counts measured the same.
    pub tp_row_groups_min_tokens: u32,
    /// Decode steps of at most this many tokens run the fused step on LL packets (`tp_fused_ll`: no fence on
    /// either hop), larger ones with a put and a signal per tile (`tp_fused`). On GPUs 4, measured on an
    /// H200 shared by two ranks (H = K = 8192): LL 44.6 against 47.6 µs at 1 token and 47.9 against 48.8 at
    /// 4, but 82 against 56 at 16, where most blocks poll for packets and the packets double the bytes.
    pub tp_ll_max_tokens: u32,
}

/// Overrides of the defaults, `field=value` pairs separated by commas (`ll_threads=512,max_blocks=64`):
/// read by [`Tuning::for_team`], so every communicator of the process — the benchmark's included — runs
/// with them.
pub const TUNING_ENV: &str = "FERROCOMM_TUNING";

/// A file of overrides (`field=value` lines, `#` comments), such as the `tuning.txt` that `ferrocomm bench`
/// writes from its sweeps: read by [`Tuning::for_team`] before [`TUNING_ENV`], which wins over it.
pub const TUNING_FILE_ENV: &str = "FERROCOMM_TUNING_FILE";

/// Bytes of two-shot scratch per rank on GPUs: slots of 64 MiB on two ranks, so a 256 MiB all-reduce runs
/// in two segments (fewer flow-control round trips: 351 → 357 GB/s bus bandwidth measured).
const GPU_SCRATCH_BYTES: usize = 128 << 20;

/// TMA stages on GPUs: four of 16 KiB keep 64 KiB in flight per block (on one H200, 32 and 48 KiB stages
/// measured the same put bandwidth per SM).
const GPU_BULK_STAGE_BYTES: usize = 16 << 10;
/// Messages from which put, get and the direct exchange copy through the TMA between GPUs (not yet swept
/// across NVLink: `ferrocomm bench --copy-paths` recommends the value).
const GPU_BULK_MIN_BYTES: usize = 1 << 20;
/// The most dynamic shared memory a block of sm_90 may opt in to (227 KiB).
const MAX_STAGING: usize = 227 << 10;

impl Tuning {
    /// Defaults for `team`: on GPUs, blocks up to the SMs each rank may use (the SM count of its GPU divided
    /// by the ranks sharing it); on the emulator, two blocks of one warp and buffers of a few hundred bytes.
    /// Then applies the file `FERROCOMM_TUNING_FILE` names ([`TUNING_FILE_ENV`]), then the overrides of
    /// `FERROCOMM_TUNING` ([`TUNING_ENV`]).
    pub fn for_team(team: &Team) -> Result<Tuning, CommError> {
        let mut tuning = match team.backend() {
            Backend::Emulator => Tuning::emulator(),
            Backend::Cuda => {
                let mut gpu = Tuning::gpu(sms_per_rank(team)?, team.world());
                // No TMA before sm_90. Between ranks sharing a GPU, loads and stores copy faster (one
                // H200, two ranks: put 1 GiB on 16 SMs 708 GB/s against the TMA's 638).
                if oldest_compute_capability(team)? < 90 || ranks_share_a_gpu(team)? {
                    gpu.bulk_stage_bytes = 0;
                }
                gpu
            }
        };
        if let Some(path) = std::env::var_os(TUNING_FILE_ENV).filter(|p| !p.is_empty()) {
            tuning.apply_file(std::path::Path::new(&path))?;
        }
        if let Ok(overrides) = std::env::var(TUNING_ENV) {
            tuning.apply(&overrides)?;
        }
        Ok(tuning)
    }

    /// Applies `field=value` overrides separated by commas (the format of [`TUNING_ENV`]); values may be
    /// written as sizes (`64KiB`, `4MiB`). An unknown field or a value that is not a number is an error
    /// naming it, and leaves `self` unchanged; the result is checked by [`Tuning::validate`] when a
    /// communicator is made.
    pub fn apply(&mut self, overrides: &str) -> Result<(), CommError> {
        self.apply_from(overrides, TUNING_ENV)
    }

    /// [`Tuning::apply`], errors saying the overrides came from `source`.
    fn apply_from(&mut self, overrides: &str, source: &str) -> Result<(), CommError> {
        let mut next = self.clone();
        for pair in overrides.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = |why: &str| CommError::BadTuning { reason: format!("`{pair}` in {source}: {why}") };
            let (field, value) = pair.split_once('=').ok_or_else(|| bad("write field=value"))?;
            let value = parse_size(value).map_err(|_| bad("the value is not a whole number or size"))?;
            let small = |v: u64| u32::try_from(v).map_err(|_| bad("the value is too large"));
            match field.trim() {
                "threads" => next.threads = small(value)?,
                "ll_threads" => next.ll_threads = small(value)?,
                "max_blocks" => next.max_blocks = small(value)?,
                "put_blocks" => next.put_blocks = small(value)?,
                "put_threads" => next.put_threads = small(value)?,
                "vectors_per_thread" => next.vectors_per_thread = small(value)?,
                "ll_vectors_per_thread" => next.ll_vectors_per_thread = small(value)?,
                "ll_all_reduce_max_bytes" => next.ll_all_reduce_max_bytes = value as usize,
                "one_shot_max_bytes" => next.one_shot_max_bytes = value as usize,
                "ll_exchange_max_bytes" => next.ll_exchange_max_bytes = value as usize,
                "scratch_bytes" => next.scratch_bytes = value as usize,
                "bulk_stage_bytes" => next.bulk_stage_bytes = value as usize,
                "bulk_min_bytes" => next.bulk_min_bytes = value as usize,
                "tp_blocks_per_sm" => next.tp_blocks_per_sm = small(value)?,
                "tp_row_groups_min_tokens" => next.tp_row_groups_min_tokens = small(value)?,
                "tp_ll_max_tokens" => next.tp_ll_max_tokens = small(value)?,
                _ => return Err(bad("no such field (see `Tuning`)")),
            }
        }
        *self = next;
        Ok(())
    }

    /// Applies the overrides in the file at `path`: one `field=value` per line (or several, separated by
    /// commas), `#` starting a comment. An unreadable file, or a line [`Tuning::apply`] refuses, is an error
    /// naming the file and leaves `self` unchanged.
    pub fn apply_file(&mut self, path: &std::path::Path) -> Result<(), CommError> {
        let text = std::fs::read_to_string(path).map_err(|e| CommError::BadTuning {
            reason: format!("cannot read {} ({TUNING_FILE_ENV}): {e}", path.display()),
        })?;
        let overrides: Vec<&str> =
            text.lines().map(|line| line.split('#').next().unwrap_or("").trim()).filter(|l| !l.is_empty()).collect();
        self.apply_from(&overrides.join(","), &format!("{} ({TUNING_FILE_ENV})", path.display()))
    }

    /// GPU defaults for `world` ranks that may each use `sms` multiprocessors. The one-shot push sends
    /// `world - 1` copies of the message per rank where the two-shot sends about two, so its range shrinks
    /// as the team grows.
    pub fn gpu(sms: u32, world: usize) -> Tuning {
        let max_blocks = sms.clamp(1, MAX_BLOCKS as u32);
        // Measured on 2 × H200 (FERROCOMM_TUNING sweeps, graph replay): 64-thread LL blocks spread small
        // messages over more SMs (64 KiB all-reduce 4.1 → 3.5 µs); 512-thread bandwidth blocks keep more
        // stores in flight (1 MiB one-shot 9.7 → 8.9 µs; kernels whose registers allow fewer get fewer);
        // 64 put blocks beat 32 at 1 GiB (363 → 369 GB/s).
        Tuning {
            threads: 512,
            ll_threads: 64,
            max_blocks,
            put_blocks: max_blocks.min(64),
            put_threads: 512,
            vectors_per_thread: 4,
            ll_vectors_per_thread: 1,
            ll_all_reduce_max_bytes: 256 << 10,
            one_shot_max_bytes: if world <= 2 { 4 << 20 } else { 1 << 20 },
            ll_exchange_max_bytes: 256 << 10,
            scratch_bytes: GPU_SCRATCH_BYTES,
            bulk_stage_bytes: GPU_BULK_STAGE_BYTES,
            bulk_min_bytes: GPU_BULK_MIN_BYTES,
            tp_blocks_per_sm: 3,
            tp_row_groups_min_tokens: 4,
            tp_ll_max_tokens: 4,
        }
    }

    /// Emulator defaults: small enough that the CPU runs every path quickly, with thresholds low enough
    /// that modest test sizes exercise both algorithms and several two-shot segments.
    pub fn emulator() -> Tuning {
        Tuning {
            threads: 32,
            ll_threads: 32,
            max_blocks: 2,
            put_blocks: 2,
            put_threads: 32,
            vectors_per_thread: 2,
            ll_vectors_per_thread: 1,
            ll_all_reduce_max_bytes: 256,
            one_shot_max_bytes: 1024,
            ll_exchange_max_bytes: 256,
            scratch_bytes: 2048,
            // The smallest stages, so the tests' few-hundred-byte copies cycle through the ring many times.
            bulk_stage_bytes: 16,
            bulk_min_bytes: 256,
            tp_blocks_per_sm: 4,
            // Every test shape shares the rows where its grid has room; the tests set it past 16 for one.
            tp_row_groups_min_tokens: 1,
            // As on GPUs: the tests' shapes of 1 to 3 tokens take the LL step, the others the signalled one.
            tp_ll_max_tokens: 4,
        }
    }

    /// Checks every field against what the kernels need for a team of `world` ranks.
    pub fn validate(&self, world: usize) -> Result<(), CommError> {
        let bad = |reason: String| Err(CommError::BadTuning { reason });
        for (name, threads) in
            [("threads", self.threads), ("ll_threads", self.ll_threads), ("put_threads", self.put_threads)]
        {
            if threads == 0 || threads % 32 != 0 || threads > 1024 {
                return bad(format!("{name} = {threads}; use a multiple of 32 between 32 and 1024"));
            }
        }
        for (name, blocks) in [("max_blocks", self.max_blocks), ("put_blocks", self.put_blocks)] {
            if blocks == 0 {
                return bad(format!("{name} = 0; at least one block is needed"));
            }
            if blocks as usize > MAX_BLOCKS {
                return Err(CommError::too_many_blocks(name, blocks));
            }
        }
        if self.tp_blocks_per_sm == 0 || self.tp_blocks_per_sm > 32 {
            return bad(format!("tp_blocks_per_sm = {}; use 1 ..= 32", self.tp_blocks_per_sm));
        }
        if self.vectors_per_thread == 0 || self.ll_vectors_per_thread == 0 {
            return bad("vectors_per_thread and ll_vectors_per_thread must be at least 1".into());
        }
        if world > MAX_WORLD {
            return Err(CommError::WorldTooLarge { world });
        }
        if !self.bulk_stage_bytes.is_multiple_of(VECTOR_BYTES)
            || bulk_staging_bytes(self.bulk_stage_bytes) > MAX_STAGING
        {
            return bad(format!(
                "bulk_stage_bytes = {}; use 0 (no TMA) or a multiple of 16 whose four stages fit a block's shared \
                 memory (at most {} bytes each)",
                self.bulk_stage_bytes,
                (MAX_STAGING - bulk_staging_bytes(0)) / BULK_STAGES
            ));
        }
        if self.scratch_bytes < world * VECTOR_BYTES {
            return bad(format!(
                "scratch_bytes = {}; the two-shot needs at least one 16-byte vector per rank ({} bytes)",
                self.scratch_bytes,
                world * VECTOR_BYTES
            ));
        }
        Ok(())
    }

    /// Blocks for a bandwidth kernel moving `vectors` 16-byte vectors per rank with `threads` threads per
    /// block: enough for `vectors_per_thread` each, at most `cap`.
    pub(crate) fn blocks_for(&self, vectors: usize, threads: u32, cap: u32) -> u32 {
        grid(vectors, threads, self.vectors_per_thread, cap)
    }

    /// The dynamic shared memory a copy of `bytes` bytes gives each block: a TMA staging ring when the
    /// message is large enough and the TMA is on, else none.
    pub(crate) fn staging_for(&self, bytes: usize) -> u32 {
        if self.bulk_stage_bytes == 0 || bytes < self.bulk_min_bytes {
            return 0;
        }
        bulk_staging_bytes(self.bulk_stage_bytes) as u32
    }

    /// [`Tuning::blocks_for`] for a latency kernel (`ll_vectors_per_thread`).
    pub(crate) fn ll_blocks_for(&self, vectors: usize, threads: u32, cap: u32) -> u32 {
        grid(vectors, threads, self.ll_vectors_per_thread, cap)
    }
}

fn grid(vectors: usize, threads: u32, per_thread: u32, cap: u32) -> u32 {
    let per_block = threads as usize * per_thread as usize;
    vectors.div_ceil(per_block).clamp(1, cap.max(1) as usize) as u32
}

/// Whether two ranks of the team run on the same GPU.
fn ranks_share_a_gpu(team: &Team) -> Result<bool, CommError> {
    let devices: Vec<Device> = (0..team.world()).map(|r| team.device(r)).collect::<Result<_, _>>()?;
    Ok(devices.iter().enumerate().any(|(i, d)| devices[..i].contains(d)))
}

/// The oldest compute capability among the team's GPUs.
fn oldest_compute_capability(team: &Team) -> Result<u32, CommError> {
    let mut oldest = u32::MAX;
    for rank in 0..team.world() {
        if let Device::Cuda { ordinal } = team.device(rank)? {
            oldest = oldest.min(ferrocomm::system::gpu(ordinal)?.compute_capability);
        }
    }
    Ok(oldest)
}

/// The multiprocessors each rank may fill with co-resident blocks: the fewest over the team's GPUs, each
/// GPU's count divided by the ranks sharing it. A process given its share of a GPU under MPS
/// (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`) already sees that share as the GPU's count, so there only the
/// ranks of one process divide it (a share the MPS daemon sets by default is not seen here, and is divided
/// again: smaller grids, never too large ones).
fn sms_per_rank(team: &Team) -> Result<u32, CommError> {
    let devices: Vec<Device> = (0..team.world()).map(|r| team.device(r)).collect::<Result<_, _>>()?;
    let share_given = team.spans_processes() && std::env::var_os(MPS_SHARE_ENV).is_some();
    let local = team.local_ranks();
    let mut fewest = u32::MAX;
    for device in &devices {
        let sharing = (0..devices.len())
            .filter(|&r| devices[r] == *device && (!share_given || local.contains(&r)))
            .count()
            .max(1) as u32;
        let sms = match device {
            Device::Cuda { ordinal } => ferrocomm::system::gpu(*ordinal)?.multiprocessors,
            Device::Emulated { .. } => 2,
        };
        fewest = fewest.min((sms / sharing).max(1));
    }
    Ok(fewest)
}

/// The variable that gives an MPS client its share of a GPU's SMs.
const MPS_SHARE_ENV: &str = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tuning_file_applies_its_lines_and_names_itself_in_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tuning.txt");
        std::fs::write(
            &path,
            "# from a sweep\nll_all_reduce_max_bytes=64KiB  # LL up to here\n\none_shot_max_bytes=2097152\n",
        )
        .unwrap();
        let mut t = Tuning::gpu(132, 2);
        t.apply_file(&path).unwrap();
        assert_eq!((t.ll_all_reduce_max_bytes, t.one_shot_max_bytes), (64 << 10, 2 << 20));
        std::fs::write(&path, "one_shot_max_bytes=1MiB\nno_such_field=3\n").unwrap();
        let e = t.apply_file(&path).unwrap_err().to_string();
        assert!(e.contains("tuning.txt") && e.contains("no_such_field"), "{e}");
        assert_eq!(t.one_shot_max_bytes, 2 << 20, "a refused file changes nothing");
        let e = t.apply_file(&dir.path().join("missing.txt")).unwrap_err().to_string();
        assert!(e.contains("cannot read") && e.contains(TUNING_FILE_ENV), "{e}");
    }

    #[test]
    fn defaults_are_valid() {
        Tuning::gpu(132, 8).validate(8).unwrap();
        Tuning::emulator().validate(4).unwrap();
        assert_eq!(Tuning::gpu(132, 2).put_blocks, 64);
        assert_eq!(Tuning::gpu(1000, 2).max_blocks, MAX_BLOCKS as u32);
    }

    #[test]
    fn bad_values_name_the_field() {
        let mut t = Tuning::emulator();
        t.threads = 48;
        assert!(t.validate(2).unwrap_err().to_string().contains("threads = 48"));
        let mut t = Tuning::emulator();
        t.max_blocks = 1000;
        assert!(t.validate(2).unwrap_err().to_string().contains("max_blocks = 1000"));
        assert!(matches!(Tuning::emulator().validate(9), Err(CommError::WorldTooLarge { world: 9 })));
    }

    #[test]
    fn overrides_set_fields_and_name_what_is_wrong() {
        let mut t = Tuning::gpu(132, 2);
        t.apply(" ll_threads=512, ll_all_reduce_max_bytes=256KiB,max_blocks=64 ").unwrap();
        assert_eq!((t.ll_threads, t.ll_all_reduce_max_bytes, t.max_blocks), (512, 256 << 10, 64));
        let before = t.clone();
        let e = t.apply("threads=64,llthreads=1").unwrap_err().to_string();
        assert_eq!(t, before, "a failed override changes nothing");
        assert!(e.contains("`llthreads=1`") && e.contains("no such field"), "{e}");
        assert!(t.apply("threads").unwrap_err().to_string().contains("field=value"));
        assert!(t.apply("threads=many").unwrap_err().to_string().contains("not a whole number"));
        assert!(t.apply("threads=8GiB").unwrap_err().to_string().contains("too large"));
        assert!(t.apply("threads=7x").unwrap_err().to_string().contains("not a whole number"));
    }

    #[test]
    fn grids_grow_with_work_up_to_the_cap() {
        let t = Tuning::gpu(132, 2);
        assert_eq!(t.ll_blocks_for(4096, 256, 132), 16);
        assert_eq!(t.blocks_for(0, 256, 132), 1);
        assert_eq!(t.blocks_for(1024, 256, 132), 1);
        assert_eq!(t.blocks_for(1025, 256, 132), 2);
        assert_eq!(t.blocks_for(1 << 30, 256, 132), 132);
    }
}
