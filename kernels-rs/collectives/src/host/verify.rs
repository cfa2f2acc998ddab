//! Correctness scenarios, written once and run on the emulator (CI), on the GPUs (the GPU test suite) and by
//! the benchmark before it times anything: each fills inputs with a deterministic pattern, runs a
//! collective through a [`Communicator`], reads every rank's result back and compares it with the CPU
//! [`reference`](super::reference), reporting the first differing element.

use std::fmt::Debug;
use std::mem::size_of;

use ferrocomm::{DeviceCopy, SymBuffer};
use ferrocomm_device::{bf16, f16};

use super::{Algorithm, CommError, Communicator, Op, Reducible, Route, reference};

/// A scenario's failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The collective (or the runtime under it) failed.
    #[error(transparent)]
    Comm(#[from] CommError),
    /// A rank holds a wrong value.
    #[error("{what}: rank {rank}, element {index}: expected {expected}, found {found}")]
    Mismatch {
        /// The scenario and its parameters.
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
}

impl From<ferrocomm::Error> for VerifyError {
    fn from(e: ferrocomm::Error) -> Self {
        VerifyError::Comm(CommError::Runtime(e))
    }
}

/// Values the scenarios fill buffers with: derived from a hash, small and exact in every type (multiples
/// of 1/4 in `-2 ..= 2` for floats), so sums of a few ranks are exact too.
pub trait Sample: DeviceCopy + PartialEq + Debug {
    /// The value for hash `h`.
    fn sample(h: u64) -> Self;
}

macro_rules! sample_int {
    ($($t:ty),*) => { $(
        impl Sample for $t {
            fn sample(h: u64) -> $t {
                h as $t
            }
        }
    )* };
}
sample_int!(u8, u16, u32, u64);

fn quarter(h: u64) -> f32 {
    (h % 17) as f32 / 4.0 - 2.0
}

impl Sample for f32 {
    fn sample(h: u64) -> f32 {
        quarter(h)
    }
}

impl Sample for bf16 {
    fn sample(h: u64) -> bf16 {
        bf16::from_f32(quarter(h))
    }
}

impl Sample for f16 {
    fn sample(h: u64) -> f16 {
        f16::from_f32(quarter(h))
    }
}

/// SplitMix64 of the seed, rank and index.
fn hash(seed: u64, rank: usize, index: usize) -> u64 {
    let mut z = seed ^ (rank as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (index as u64) << 20;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Rank `rank`'s `len` input values for `seed`.
pub fn pattern<T: Sample>(seed: u64, rank: usize, len: usize) -> Vec<T> {
    (0..len).map(|i| T::sample(hash(seed, rank, i))).collect()
}

fn compare<T: Debug + PartialEq>(what: &str, rank: usize, expected: &[T], found: &[T]) -> Result<(), VerifyError> {
    if expected.len() != found.len() {
        return Err(VerifyError::Mismatch {
            what: format!("{what} (length)"),
            rank,
            index: expected.len().min(found.len()),
            expected: format!("{} elements", expected.len()),
            found: format!("{} elements", found.len()),
        });
    }
    match expected.iter().zip(found).position(|(e, f)| e != f) {
        None => Ok(()),
        Some(index) => Err(VerifyError::Mismatch {
            what: what.to_owned(),
            rank,
            index,
            expected: format!("{:?}", expected[index]),
            found: format!("{:?}", found[index]),
        }),
    }
}

/// Fills rank `r` of `buf` with `pattern(seed, r)` and returns the inputs.
fn fill<T: Sample>(buf: &mut SymBuffer<T>, seed: u64) -> Result<Vec<Vec<T>>, VerifyError> {
    let inputs: Vec<Vec<T>> = (0..buf.world()).map(|r| pattern(seed, r, buf.len())).collect();
    // In a team that spans processes each process fills its own ranks; every process knows every input.
    for rank in buf.local_ranks() {
        buf.copy_from_host(rank, &inputs[rank])?;
    }
    Ok(inputs)
}

/// All-reduce of `len` elements with `op` (by `algorithm`, or the size's default), `repeat` times in a row
/// on the same buffer with fresh inputs each time (which exercises the epochs).
pub fn all_reduce<T: Reducible + Sample>(
    comm: &mut Communicator<'_>,
    len: usize,
    op: Op,
    algorithm: Option<Algorithm>,
    repeat: usize,
    seed: u64,
) -> Result<(), VerifyError> {
    let mut buf = SymBuffer::<T>::new(comm.team(), len)?;
    for round in 0..repeat {
        let seed = seed.wrapping_add(round as u64);
        let inputs = fill(&mut buf, seed)?;
        let algorithm = algorithm.unwrap_or_else(|| comm.all_reduce_algorithm(len * size_of::<T>()));
        comm.all_reduce_with(&mut buf, op, algorithm)?.wait()?;
        let expected = reference::all_reduce(&inputs, op);
        let what = format!("all-reduce {} x {len} {op:?} {algorithm:?} round {round}", T::NAME);
        for rank in buf.local_ranks() {
            compare(&what, rank, &expected, &buf.to_host(rank)?)?;
        }
    }
    Ok(())
}

/// Reduce-scatter of `world * chunk` elements with `op`.
pub fn reduce_scatter<T: Reducible + Sample>(
    comm: &mut Communicator<'_>,
    chunk: usize,
    op: Op,
    seed: u64,
) -> Result<(), VerifyError> {
    let world = comm.world();
    let mut input = SymBuffer::<T>::new(comm.team(), world * chunk)?;
    let inputs = fill(&mut input, seed)?;
    let mut output = SymBuffer::<T>::new(comm.team(), chunk)?;
    comm.reduce_scatter(&input, &mut output, op)?.wait()?;
    let expected = reference::reduce_scatter(&inputs, op);
    let what = format!("reduce-scatter {} x {chunk} per rank {op:?}", T::NAME);
    for rank in output.local_ranks() {
        compare(&what, rank, &expected[rank], &output.to_host(rank)?)?;
    }
    Ok(())
}

/// All-gather of `len` elements per rank.
pub fn all_gather<T: Sample>(comm: &mut Communicator<'_>, len: usize, seed: u64) -> Result<(), VerifyError> {
    let world = comm.world();
    let mut input = SymBuffer::<T>::new(comm.team(), len)?;
    let inputs = fill(&mut input, seed)?;
    let mut output = SymBuffer::<T>::new(comm.team(), world * len)?;
    fill(&mut output, !seed)?;
    comm.all_gather(&input, &mut output)?.wait()?;
    let expected = reference::all_gather(&inputs);
    let what = format!("all-gather {len} per rank");
    for rank in output.local_ranks() {
        compare(&what, rank, &expected, &output.to_host(rank)?)?;
    }
    Ok(())
}

/// Broadcast of `len` elements from `root` (the other ranks start with different values).
pub fn broadcast<T: Sample>(
    comm: &mut Communicator<'_>,
    len: usize,
    root: usize,
    seed: u64,
) -> Result<(), VerifyError> {
    let mut buf = SymBuffer::<T>::new(comm.team(), len)?;
    let inputs = fill(&mut buf, seed)?;
    comm.broadcast(&mut buf, root)?.wait()?;
    let expected = reference::broadcast(&inputs, root);
    let what = format!("broadcast {len} from {root}");
    for rank in buf.local_ranks() {
        compare(&what, rank, &expected, &buf.to_host(rank)?)?;
    }
    Ok(())
}

/// All-to-all where rank `r` sends `counts[r][q]` rows of `row_len` elements to rank `q`, into slots of
/// `cap_rows` rows. Rows beyond a slot's count must keep their old contents.
pub fn all_to_all<T: Sample>(
    comm: &mut Communicator<'_>,
    counts: &[Vec<u32>],
    row_len: usize,
    cap_rows: usize,
    seed: u64,
) -> Result<(), VerifyError> {
    let world = comm.world();
    let team = comm.team();
    let rows = counts.iter().map(|c| c.iter().map(|&n| n as usize).sum::<usize>()).max().unwrap_or(0);
    let mut send = SymBuffer::<T>::new(team, rows * row_len)?;
    let sends = fill(&mut send, seed)?;
    let mut send_counts = SymBuffer::<u32>::new(team, world)?;
    for rank in send_counts.local_ranks() {
        send_counts.copy_from_host(rank, &counts[rank])?;
    }
    let mut recv = SymBuffer::<T>::new(team, world * cap_rows * row_len)?;
    let before = fill(&mut recv, !seed)?;
    let mut recv_counts = SymBuffer::<u32>::new(team, world)?;
    recv_counts.fill(u32::MAX)?;
    comm.all_to_all(&send, &send_counts, &mut recv, &mut recv_counts, row_len, cap_rows)?.wait()?;
    let expected = reference::all_to_all(&sends, counts, row_len);
    let what = format!("all-to-all {counts:?} rows of {row_len}, capacity {cap_rows}");
    for rank in recv.local_ranks() {
        let received = &expected[rank];
        compare(&format!("{what} (counts)"), rank, &received.counts, &recv_counts.to_host(rank)?)?;
        let mut want = before[rank].clone();
        for (src, rows) in received.rows.iter().enumerate() {
            let at = src * cap_rows * row_len;
            want[at..at + rows.len()].copy_from_slice(rows);
        }
        compare(&what, rank, &want, &recv.to_host(rank)?)?;
    }
    Ok(())
}

/// Put (`get == false`) or get of `len` elements along `route`; ranks that receive nothing keep their
/// destination unchanged.
pub fn put_or_get<T: Sample>(
    comm: &mut Communicator<'_>,
    len: usize,
    dst_len: usize,
    route: Route,
    get: bool,
    seed: u64,
) -> Result<(), VerifyError> {
    let world = comm.world();
    let mut src = SymBuffer::<T>::new(comm.team(), len)?;
    let sources = fill(&mut src, seed)?;
    let mut dst = SymBuffer::<T>::new(comm.team(), dst_len)?;
    let before = fill(&mut dst, !seed)?;
    if get {
        comm.get(&mut dst, &src, route)?.wait()?;
    } else {
        comm.put(&src, &mut dst, route)?.wait()?;
    }
    // (writer or reader, the rank whose `src` it copies, the rank whose `dst` changes)
    let pairs: Vec<(usize, usize)> = match route {
        Route::Pair { from, to } if get => vec![(to, from)],
        Route::Pair { from, to } => vec![(from, to)],
        Route::Shift(k) if get => (0..world).map(|r| ((r + k) % world, r)).collect(),
        Route::Shift(k) => (0..world).map(|r| (r, (r + k) % world)).collect(),
    };
    let what = format!("{} of {len} into {dst_len} along {route:?}", if get { "get" } else { "put" });
    for rank in dst.local_ranks() {
        let mut want = before[rank].clone();
        if let Some(&(source, _)) = pairs.iter().find(|&&(_, d)| d == rank) {
            let n = len.min(dst_len);
            want[..n].copy_from_slice(&sources[source][..n]);
        }
        compare(&what, rank, &want, &dst.to_host(rank)?)?;
    }
    Ok(())
}

/// `per_graph` all-reduces (sum) of `len` elements captured into one graph and replayed `replays` times,
/// with fresh inputs before each replay. After every `check_every`-th replay (and the last) the whole
/// buffer is compared with the reference applied `per_graph` times; after the others, 16 sampled elements.
pub fn all_reduce_graph<T: Reducible + Sample>(
    comm: &mut Communicator<'_>,
    len: usize,
    per_graph: usize,
    replays: usize,
    check_every: usize,
    seed: u64,
) -> Result<(), VerifyError> {
    let team = comm.team();
    let world = team.world();
    let mut buf = SymBuffer::<T>::new(team, len)?;
    let graph = comm.capture(|comm| {
        for _ in 0..per_graph {
            comm.all_reduce(&mut buf, Op::Sum)?.wait()?;
        }
        Ok(())
    })?;
    for replay in 0..replays {
        let seed = seed.wrapping_add(replay as u64);
        let inputs: Vec<Vec<T>> = (0..world).map(|r| pattern(seed, r, len)).collect();
        for rank in buf.local_ranks() {
            buf.copy_from_host(rank, &inputs[rank])?;
        }
        graph.replay()?.wait()?;
        let full = replay % check_every.max(1) == 0 || replay + 1 == replays;
        let indices: Vec<usize> =
            if full { (0..len).collect() } else { (0..16).map(|i| hash(seed, i, 7) as usize % len.max(1)).collect() };
        let expected: Vec<T> = indices.iter().map(|&i| iterate_sum(&inputs, i, per_graph)).collect();
        let what = format!("graph of {per_graph} all-reduces {} x {len}, replay {replay}", T::NAME);
        for rank in buf.local_ranks() {
            let found = buf.to_host(rank)?;
            let found: Vec<T> = if len == 0 { Vec::new() } else { indices.iter().map(|&i| found[i]).collect() };
            let expected = if len == 0 { Vec::new() } else { expected.clone() };
            compare(&what, rank, &expected, &found)?;
        }
    }
    Ok(())
}

/// Element `i` after `times` sum all-reduces of `inputs`, as [`reference::all_reduce`] computes it (the
/// same `f32` accumulation in rank order) but on one element, without allocating: full checks of large
/// graphs compute it for every element.
fn iterate_sum<T: Reducible>(inputs: &[Vec<T>], i: usize, times: usize) -> T {
    let reduce = |value: &dyn Fn(usize) -> T| {
        let acc = (1..inputs.len()).fold(value(0).to_f32(), |acc, r| Op::Sum.apply(acc, value(r).to_f32()));
        T::from_f32(acc)
    };
    let mut v = if times == 0 { inputs[0][i] } else { reduce(&|r| inputs[r][i]) };
    for _ in 1..times {
        v = reduce(&|_| v);
    }
    v
}

/// The tensor-parallel GEMV of `shape`: each rank's partial tiles, summed over the splits on the host,
/// against [`reference::tp_gemv`] of its shard. The inputs are multiples of 1/4 in [-2, 2], so every sum is
/// exact in `f32` and the comparison is exact.
pub fn tp_gemv(comm: &mut Communicator<'_>, shape: crate::TpShape, seed: u64) -> Result<(), VerifyError> {
    use crate::layout::TP_TILE_COLS;
    let plan = comm.tp_plan(shape)?;
    let (team, tokens, hidden) = (comm.team(), shape.tokens, shape.hidden);
    let k_local = plan.k_local as usize;
    let mut x = SymBuffer::<bf16>::new(team, tokens * k_local)?;
    let mut w = SymBuffer::<bf16>::new(team, k_local * hidden)?;
    let mut partials = SymBuffer::<f32>::new(team, plan.partials_len())?;
    let (xs, ws) = (fill(&mut x, seed)?, fill(&mut w, seed ^ 0x5EED)?);
    comm.tp_gemv(&x, &w, &mut partials, plan)?.wait()?;
    let what = format!(
        "tensor-parallel GEMV {shape:?} ({} tiles x {} splits, {} row groups)",
        plan.tiles, plan.splits, plan.row_groups
    );
    for rank in partials.local_ranks() {
        let p = partials.to_host(rank)?;
        let mut y = vec![0.0f32; tokens * hidden];
        for (j, row) in y.chunks_mut(hidden).enumerate() {
            for (c, out) in row.iter_mut().enumerate() {
                let (tile, col) = (c / TP_TILE_COLS, c % TP_TILE_COLS);
                *out = (0..plan.splits as usize).map(|s| p[plan.partial(tile, s) + j * TP_TILE_COLS + col]).sum();
            }
        }
        compare(&what, rank, &reference::tp_gemv(&xs[rank], &ws[rank], tokens, hidden), &y)?;
    }
    Ok(())
}

/// A tensor-parallel decode step of `shape` by `variant`, run twice in a row on the same buffers (which
/// exercises the pads' epochs), against [`reference::tp_decode`] on every rank: within two `bf16` steps of
/// rounding (the device sums the squares in another order, and its `rsqrt` is within 2 ulp).
pub fn tp_decode(
    comm: &mut Communicator<'_>,
    shape: crate::TpShape,
    variant: crate::TpVariant,
    seed: u64,
) -> Result<(), VerifyError> {
    tp_decode_by(comm, shape, &format!("{variant:?}"), seed, |comm, decode, inputs, out| {
        let crate::TpInputs { x, w, residual, gamma } = inputs;
        Ok(decode.step(comm, variant, x, w, residual, gamma, out)?)
    })
}

/// [`tp_decode`] for a step that `step` runs, `name` saying which: a step the library's variants do not
/// cover, such as [`TpDecode::step_with_all_reduce`](crate::TpDecode::step_with_all_reduce) with another
/// library's all-reduce. `step` gets the operands and writes `out`, on every rank of this process.
pub fn tp_decode_by<'t, E: From<VerifyError>>(
    comm: &mut Communicator<'t>,
    shape: crate::TpShape,
    name: &str,
    seed: u64,
    mut step: impl FnMut(
        &mut Communicator<'t>,
        &mut crate::TpDecode,
        crate::TpInputs<'_>,
        &mut SymBuffer<bf16>,
    ) -> Result<(), E>,
) -> Result<(), E> {
    let mut decode = crate::TpDecode::new(comm, shape).map_err(VerifyError::from)?;
    let team = comm.team();
    let (tokens, hidden) = (shape.tokens, shape.hidden);
    let k_local = shape.k_local(comm.world());
    let buffer = |len: usize| SymBuffer::<bf16>::new(team, len).map_err(VerifyError::from);
    let (mut x, mut w) = (buffer(tokens * k_local)?, buffer(k_local * hidden)?);
    let (mut residual, mut gamma, mut out) = (buffer(tokens * hidden)?, buffer(hidden)?, buffer(tokens * hidden)?);
    let ws = fill(&mut w, seed ^ 0x5EED)?;
    // Residual and norm weights are the same on every rank (a replicated activation and parameter).
    let same = |buf: &mut SymBuffer<bf16>, s: u64| -> Result<Vec<bf16>, VerifyError> {
        let v: Vec<bf16> = pattern(s, 0, buf.len());
        for rank in buf.local_ranks() {
            buf.copy_from_host(rank, &v)?;
        }
        Ok(v)
    };
    let (res, g) = (same(&mut residual, seed ^ 0xA11)?, same(&mut gamma, seed ^ 0xB22)?);
    for round in 0..2 {
        // New activations each round, and the output poisoned before it: a step that waited on a stale epoch,
        // or wrote nothing, would leave the previous round's (correct) result or the poison behind.
        let xs = fill(&mut x, seed.wrapping_add(round as u64))?;
        out.fill(bf16::from_f32(f32::NAN)).map_err(VerifyError::from)?;
        let expected = reference::tp_decode(&xs, &ws, &res, &g, (tokens, hidden, crate::TP_RMS_EPS));
        let inputs = crate::TpInputs { x: &x, w: &w, residual: &residual, gamma: &gamma };
        step(comm, &mut decode, inputs, &mut out)?;
        let what = format!("tensor-parallel decode {shape:?} {name} round {round}");
        for rank in out.local_ranks() {
            let found = out.to_host(rank).map_err(VerifyError::from)?;
            let close = |e: &bf16, f: &bf16| (e.to_f32() - f.to_f32()).abs() <= e.to_f32().abs() / 64.0 + 1e-3;
            if let Some(index) = expected.iter().zip(&found).position(|(e, f)| !close(e, f)) {
                return Err(VerifyError::Mismatch {
                    what,
                    rank,
                    index,
                    expected: format!("{:?}", expected[index]),
                    found: format!("{:?}", found[index]),
                }
                .into());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iterated_sums_match_the_reference_applied_repeatedly() {
        let inputs: Vec<Vec<bf16>> = (0..3).map(|r| pattern(9, r, 5)).collect();
        for times in 0..4 {
            let mut column = inputs.clone();
            for _ in 0..times {
                column = vec![reference::all_reduce(&column, Op::Sum); inputs.len()];
            }
            let found: Vec<bf16> = (0..5).map(|i| iterate_sum(&inputs, i, times)).collect();
            assert_eq!(found, column[0], "{times} all-reduces");
        }
    }
}
