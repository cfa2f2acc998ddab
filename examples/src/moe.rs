//! A mixture-of-experts layer's communication: every rank holds `tokens` tokens of `hidden` bf16 values,
//! each routed to the expert on one rank. The dispatch is an all-to-all with per-destination counts (in
//! device memory, as a router kernel would leave them); the expert scales its rows; the combine sends them
//! back with the received counts as its send counts. Both directions are verified against the CPU
//! reference and timed from graph replays.

use ferrocomm::SymBuffer;
use ferrocomm_device::bf16;
use ferrocomm_kernels::verify::pattern;
use ferrocomm_kernels::{Communicator, ExchangeTransport, reference};

use crate::all_reduce::GraphRuns;
use crate::error::{ExampleError, check_equal};
use crate::timing::{Timing, format_bytes, time_replays};

/// DeepSeek-V3's hidden size: the row length the examples default to.
pub const HIDDEN: usize = 7168;

/// The outcome of [`dispatch_and_combine`]: both directions verified, and their times.
#[derive(Debug, Clone, PartialEq)]
pub struct MoeResult {
    /// Tokens per rank.
    pub tokens: usize,
    /// Values per token.
    pub hidden: usize,
    /// `counts[r][q]`: tokens rank `r` routed to the expert on rank `q`.
    pub counts: Vec<Vec<u32>>,
    /// How the messages travel (chosen by slot size).
    pub transport: ExchangeTransport,
    /// Time per dispatch.
    pub dispatch: Timing,
    /// Time per combine.
    pub combine: Timing,
}

impl MoeResult {
    /// Lines for the report: shape, routing, times.
    pub fn lines(&self) -> Vec<String> {
        let bytes = self.tokens * self.hidden * 2;
        vec![
            format!(
                "{} tokens x {} bf16 per rank ({}), {:?} transport, tokens per expert rank: {:?}",
                self.tokens,
                self.hidden,
                format_bytes(bytes),
                self.transport,
                self.counts
            ),
            format!(
                "  dispatch {:>9.2} us/op   combine {:>9.2} us/op   verified",
                self.dispatch.median_us(),
                self.combine.median_us()
            ),
        ]
    }
}

/// The expert rank of token `t` of rank `r`: a fixed pseudo-random top-1 routing (uneven on purpose), except
/// that token 0 always goes to the next rank, so even a single token crosses to a peer.
pub fn route(seed: u64, rank: usize, token: usize, world: usize) -> usize {
    if token == 0 {
        return (rank + 1) % world;
    }
    let mut z = seed ^ ((rank as u64) << 32) ^ token as u64;
    z = (z ^ (z >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    z = (z ^ (z >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    ((z ^ (z >> 33)) % world as u64) as usize
}

/// The expert's work on a row of rank `expert`: multiply by `expert + 1` (done on the host here; the point
/// is the communication around it).
fn expert(row: &[bf16], expert: usize) -> impl Iterator<Item = bf16> + '_ {
    let weight = (expert + 1) as f32;
    row.iter().map(move |x| bf16::from_f32(x.to_f32() * weight))
}

/// Dispatch and combine of `tokens` tokens of `hidden` bf16 per rank: verified once directly and again
/// after timed graph replays.
pub fn dispatch_and_combine(
    comm: &mut Communicator<'_>,
    tokens: usize,
    hidden: usize,
    runs: GraphRuns,
    seed: u64,
) -> Result<MoeResult, ExampleError> {
    let team = comm.team();
    let world = team.world();
    if hidden == 0 {
        return Err(ExampleError::BadArgument("the hidden size must be at least 1".into()));
    }
    // A source sends at most all of its tokens to one expert: slots of `tokens` rows.
    let cap = tokens.max(1);

    // Route every token; pack the rows in destination order, as the all-to-all takes them.
    let mut counts = vec![vec![0u32; world]; world];
    let mut order = Vec::with_capacity(world); // order[r]: rank r's tokens sorted by destination
    let mut sends = Vec::with_capacity(world);
    for (rank, counts) in counts.iter_mut().enumerate() {
        let rows: Vec<bf16> = pattern(seed, rank, tokens * hidden);
        let mut tokens_by_dst: Vec<usize> = (0..tokens).collect();
        tokens_by_dst.sort_by_key(|&t| route(seed, rank, t, world));
        for &t in &tokens_by_dst {
            counts[route(seed, rank, t, world)] += 1;
        }
        let mut packed: Vec<bf16> =
            tokens_by_dst.iter().flat_map(|&t| &rows[t * hidden..(t + 1) * hidden]).copied().collect();
        packed.resize(cap * hidden, bf16::default()); // zero tokens still take one row's room
        sends.push(packed);
        order.push((tokens_by_dst, rows));
    }
    let mut send = SymBuffer::<bf16>::new(team, cap * hidden)?;
    let mut send_counts = SymBuffer::<u32>::new(team, world)?;
    for rank in team.local_ranks() {
        send.copy_from_host(rank, &sends[rank])?;
        send_counts.copy_from_host(rank, &counts[rank])?;
    }

    // Dispatch: rank q's slot r receives rank r's rows for expert q, and their count.
    let mut recv = SymBuffer::<bf16>::new(team, world * cap * hidden)?;
    let mut recv_counts = SymBuffer::<u32>::new(team, world)?;
    comm.all_to_all(&send, &send_counts, &mut recv, &mut recv_counts, hidden, cap)?.wait()?;
    let expected = reference::all_to_all(&sends, &counts, hidden);
    let check_dispatch = |recv: &SymBuffer<bf16>, recv_counts: &SymBuffer<u32>, stage: &str| {
        let what = format!("MoE dispatch {tokens} x {hidden} ({stage})");
        for rank in team.local_ranks() {
            let got = &expected[rank];
            check_equal(&format!("{what}, counts"), rank, &got.counts, &recv_counts.to_host(rank)?)?;
            let held = recv.to_host(rank)?;
            for (src, rows) in got.rows.iter().enumerate() {
                let at = src * cap * hidden;
                check_equal(&format!("{what}, rows from rank {src}"), rank, rows, &held[at..at + rows.len()])?;
            }
        }
        Ok::<(), ExampleError>(())
    };
    check_dispatch(&recv, &recv_counts, "direct call")?;

    // The expert: scale the received rows and pack them in source order — the combine's send layout.
    let mut expert_out = SymBuffer::<bf16>::new(team, world * cap * hidden)?;
    for q in team.local_ranks() {
        let got = &expected[q];
        let mut packed: Vec<bf16> = got.rows.iter().flat_map(|rows| expert(rows, q)).collect();
        packed.resize(world * cap * hidden, bf16::default());
        expert_out.copy_from_host(q, &packed)?;
    }

    // Combine: the received counts are the send counts; rank r's slot q returns its tokens from expert q.
    let mut back = SymBuffer::<bf16>::new(team, world * cap * hidden)?;
    let mut back_counts = SymBuffer::<u32>::new(team, world)?;
    comm.all_to_all(&expert_out, &recv_counts, &mut back, &mut back_counts, hidden, cap)?.wait()?;
    let check_combine = |back: &SymBuffer<bf16>, back_counts: &SymBuffer<u32>, stage: &str| {
        let what = format!("MoE combine {tokens} x {hidden} ({stage})");
        for rank in team.local_ranks() {
            let (tokens_by_dst, rows) = &order[rank];
            check_equal(&format!("{what}, counts"), rank, &counts[rank], &back_counts.to_host(rank)?)?;
            let held = back.to_host(rank)?;
            // The tokens for expert q fill slot q of the reply in the packed (send) order.
            let mut next_in_slot = vec![0usize; world];
            for &t in tokens_by_dst {
                let q = route(seed, rank, t, world);
                let at = (q * cap + next_in_slot[q]) * hidden;
                next_in_slot[q] += 1;
                let want: Vec<bf16> = expert(&rows[t * hidden..(t + 1) * hidden], q).collect();
                check_equal(&format!("{what}, token {t} from expert {q}"), rank, &want, &held[at..at + hidden])?;
            }
        }
        Ok::<(), ExampleError>(())
    };
    check_combine(&back, &back_counts, "direct call")?;

    // Timed: graphs of back-to-back dispatches and of combines on the same buffers. The outputs are
    // overwritten with junk first, so the checks after the replays see what the replays wrote.
    let transport = comm.exchange_transport(cap * hidden * 2);
    let ops = runs.ops_per_graph.max(1);
    let junk = bf16::from_f32(99.0);
    recv.fill(junk)?;
    recv_counts.fill(u32::MAX)?;
    back.fill(junk)?;
    back_counts.fill(u32::MAX)?;
    let graph = comm.capture(|comm| {
        for _ in 0..ops {
            comm.all_to_all(&send, &send_counts, &mut recv, &mut recv_counts, hidden, cap)?.wait()?;
        }
        Ok(())
    })?;
    let dispatch = time_replays(&graph, ops, runs.warmup, runs.replays)?;
    drop(graph);
    check_dispatch(&recv, &recv_counts, "after graph replays")?;
    let graph = comm.capture(|comm| {
        for _ in 0..ops {
            comm.all_to_all(&expert_out, &recv_counts, &mut back, &mut back_counts, hidden, cap)?.wait()?;
        }
        Ok(())
    })?;
    let combine = time_replays(&graph, ops, runs.warmup, runs.replays)?;
    drop(graph);
    check_combine(&back, &back_counts, "after graph replays")?;
    Ok(MoeResult { tokens, hidden, counts, transport, dispatch, combine })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_reaches_every_rank_and_is_fixed() {
        let hits: Vec<usize> = (0..64).map(|t| route(3, 1, t, 4)).collect();
        assert!((0..4).all(|q| hits.contains(&q)), "{hits:?}");
        assert_eq!(hits, (0..64).map(|t| route(3, 1, t, 4)).collect::<Vec<_>>());
    }
}
