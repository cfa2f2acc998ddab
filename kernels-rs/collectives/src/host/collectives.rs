//! The collectives of [`Communicator`]: all-reduce (LL one-shot, one-shot push or two-shot by size),
//! reduce-scatter (two-shot), and all-gather, broadcast and all-to-all with device-resident counts (LL,
//! staged or direct by message size).

use std::mem::size_of;

use ferrocomm::{ByteView, ByteViewMut, DeviceCopy, LaunchConfig, LaunchGuard, SymBuffer};

use super::{Algorithm, CommError, Communicator, ExchangeTransport, Op, Reducible};
use crate::kernels::{all_reduce_ll, exchange, one_shot, two_shot};
use crate::layout::{ExchangePlan, TwoShotPlan, VECTOR_BYTES, exchange_mode, ll_slot_packets};

/// Bytes of a message an LL region of `slot_packets` packets carries.
fn ll_capacity(slot_packets: usize) -> usize {
    (slot_packets - 1) / 2 * VECTOR_BYTES
}

impl<'t> Communicator<'t> {
    /// The all-reduce algorithm [`Communicator::all_reduce`] uses for `bytes` bytes per rank: the LL
    /// one-shot up to [`Tuning::ll_all_reduce_max_bytes`](super::Tuning), the one-shot push up to
    /// `one_shot_max_bytes`, the two-shot above.
    pub fn all_reduce_algorithm(&self, bytes: usize) -> Algorithm {
        let t = &self.tuning;
        if bytes <= t.ll_all_reduce_max_bytes {
            Algorithm::LlOneShot
        } else if bytes <= t.one_shot_max_bytes {
            Algorithm::OneShot
        } else {
            Algorithm::TwoShot
        }
    }

    /// The transport broadcast, all-gather and all-to-all use for messages of up to `bytes` bytes per
    /// destination: LL up to [`Tuning::ll_exchange_max_bytes`](super::Tuning), staged up to the staging
    /// slot (`one_shot_max_bytes`), direct stores above.
    pub fn exchange_transport(&self, bytes: usize) -> ExchangeTransport {
        if bytes <= self.tuning.ll_exchange_max_bytes {
            ExchangeTransport::Ll
        } else if bytes <= self.stage_slot_vectors * VECTOR_BYTES {
            ExchangeTransport::Staged
        } else {
            ExchangeTransport::Direct
        }
    }

    /// All-reduce of `buf` in place with `op`: afterwards every rank holds the element-wise reduction of
    /// every rank's buffer (accumulated in `f32` in rank order, rounded once). The algorithm is chosen by
    /// size ([`Communicator::all_reduce_algorithm`]).
    pub fn all_reduce<'a, T: Reducible>(
        &'a mut self,
        buf: &'a mut SymBuffer<T>,
        op: Op,
    ) -> Result<LaunchGuard<'a>, CommError> {
        let algorithm = self.all_reduce_algorithm(buf.len() * size_of::<T>());
        self.all_reduce_with(buf, op, algorithm)
    }

    /// [`Communicator::all_reduce`] with the algorithm chosen by the caller.
    pub fn all_reduce_with<'a, T: Reducible>(
        &'a mut self,
        buf: &'a mut SymBuffer<T>,
        op: Op,
        algorithm: Algorithm,
    ) -> Result<LaunchGuard<'a>, CommError> {
        let bytes = buf.len() * size_of::<T>();
        let t = &self.tuning;
        match algorithm {
            Algorithm::LlOneShot => {
                let max = ll_capacity(self.ll_slot_packets);
                if bytes > max {
                    return Err(CommError::TooLarge {
                        what: "LL all-reduce message",
                        bytes,
                        max,
                        fix: "use the two-shot, or raise Tuning::ll_all_reduce_max_bytes",
                    });
                }
                let vectors = bytes.div_ceil(VECTOR_BYTES);
                let cfg = LaunchConfig::new(t.ll_blocks_for(vectors, t.ll_threads, t.max_blocks), t.ll_threads);
                let slot = self.ll_slot_packets as u64;
                Ok(all_reduce_ll::all_reduce::launch(
                    self.team,
                    cfg,
                    buf,
                    &mut self.ll,
                    &self.one_shot_pad,
                    op.code(),
                    slot,
                )?)
            }
            Algorithm::OneShot => {
                let vectors = bytes.div_ceil(VECTOR_BYTES);
                if vectors > self.stage_slot_vectors {
                    return Err(CommError::TooLarge {
                        what: "one-shot all-reduce message",
                        bytes,
                        max: self.stage_slot_vectors * VECTOR_BYTES,
                        fix: "use the two-shot, or raise Tuning::one_shot_max_bytes",
                    });
                }
                let cfg = LaunchConfig::new(t.ll_blocks_for(vectors, t.threads, t.max_blocks), t.threads);
                let slot = self.stage_slot_vectors as u64;
                Ok(one_shot::all_reduce::launch(
                    self.team,
                    cfg,
                    buf,
                    &mut self.stage,
                    &self.one_shot_pad,
                    op.code(),
                    slot,
                )?)
            }
            Algorithm::TwoShot => {
                let world = self.world();
                // Chunks start on 16-byte boundaries so every vector access is aligned.
                let chunk = buf.len().div_ceil(world).next_multiple_of(T::LANES).max(1);
                let plan = self.two_shot_plan(op, true, buf.len(), chunk);
                let cfg = self.two_shot_config(two_shot::all_reduce::kernel::<T>(), size_of::<T>(), chunk)?;
                // An all-reduce writes its result into `data`: no separate output.
                Ok(two_shot::all_reduce::launch(
                    self.team,
                    cfg,
                    buf,
                    None,
                    &mut self.scratch,
                    &self.two_shot_pad,
                    plan,
                )?)
            }
        }
    }

    /// Reduce-scatter with `op`: `input` holds `world * n` elements on every rank, and rank `r`'s `output`
    /// (`n` elements) receives chunk `r` of the element-wise reduction. Two-shot without the gather.
    pub fn reduce_scatter<'a, T: Reducible>(
        &'a mut self,
        input: &'a SymBuffer<T>,
        output: &'a mut SymBuffer<T>,
        op: Op,
    ) -> Result<LaunchGuard<'a>, CommError> {
        let world = self.world();
        if input.len() != world * output.len() {
            return Err(CommError::LengthMismatch {
                what: "reduce-scatter input (world x output length)",
                expected: world * output.len(),
                found: input.len(),
            });
        }
        let chunk = output.len().max(1);
        let plan = self.two_shot_plan(op, false, input.len(), chunk);
        let cfg = self.two_shot_config(two_shot::reduce_scatter::kernel::<T>(), size_of::<T>(), chunk)?;
        Ok(two_shot::reduce_scatter::launch(
            self.team,
            cfg,
            input,
            output,
            &mut self.scratch,
            &self.two_shot_pad,
            plan,
        )?)
    }

    fn two_shot_plan(&self, op: Op, gather: bool, len: usize, chunk: usize) -> TwoShotPlan {
        TwoShotPlan {
            op: op.code(),
            gather: u32::from(gather),
            len: len as u64,
            chunk: chunk as u64,
            slot_vectors: self.slot_vectors as u64,
        }
    }

    /// The two-shot's grid for `kernel` (elements of `elem_bytes`): `Tuning::threads` per block, or fewer
    /// where the kernel's registers allow fewer (the driver's limit for the compiled kernel: on sm_90 a
    /// kernel of more than 128 registers per thread fits at most 384).
    fn two_shot_config(
        &self,
        kernel: &'static ferrocomm::Kernel,
        elem_bytes: usize,
        chunk: usize,
    ) -> Result<LaunchConfig, CommError> {
        let t = &self.tuning;
        let threads = t.threads.min(self.team.max_threads_per_block(kernel)? / 32 * 32).max(32);
        let segment = (chunk * elem_bytes).div_ceil(VECTOR_BYTES).min(self.slot_vectors);
        Ok(LaunchConfig::new(t.blocks_for(segment, threads, t.max_blocks), threads)
            .with_shared_bytes(t.staging_for(chunk * elem_bytes)))
    }

    /// All-gather: every rank's `input` (`n` elements) lands in slot `r` (elements `r * n ..`) of every
    /// rank's `output` (`world * n` elements).
    pub fn all_gather<'a, T: DeviceCopy>(
        &'a mut self,
        input: &'a SymBuffer<T>,
        output: &'a mut SymBuffer<T>,
    ) -> Result<LaunchGuard<'a>, CommError> {
        let world = self.world();
        if output.len() != world * input.len() {
            return Err(CommError::LengthMismatch {
                what: "all-gather output (world x input length)",
                expected: world * input.len(),
                found: output.len(),
            });
        }
        let bytes = input.len() * size_of::<T>();
        let plan = self.exchange_plan(exchange_mode::ALL_GATHER, 0, bytes, bytes, 0);
        let buffers =
            ExchangeBuffers { src: Some(input.bytes()), send_counts: None, dst: output.bytes_mut(), recv_counts: None };
        self.launch_exchange(bytes, plan, buffers)
    }

    /// Broadcast: `root`'s `buf` lands in every rank's `buf`.
    pub fn broadcast<'a, T: DeviceCopy>(
        &'a mut self,
        buf: &'a mut SymBuffer<T>,
        root: usize,
    ) -> Result<LaunchGuard<'a>, CommError> {
        let world = self.world();
        if root >= world {
            return Err(CommError::RankOutOfRange { what: "broadcast root", rank: root, world });
        }
        let bytes = buf.len() * size_of::<T>();
        let plan = self.exchange_plan(exchange_mode::BROADCAST, root, bytes, 0, 0);
        // No send buffer: the root sends its part of `buf`, which no rank writes in a broadcast (the kernels'
        // `exchange_buffers`); the others send nothing and receive into theirs.
        let buffers = ExchangeBuffers { src: None, send_counts: None, dst: buf.bytes_mut(), recv_counts: None };
        self.launch_exchange(bytes, plan, buffers)
    }

    /// All-to-all with per-destination row counts in device memory (MoE dispatch and combine).
    ///
    /// Rank `r` sends `send_counts[q]` rows of `row_len` elements to each rank `q`, taken in destination
    /// order from the start of `send` (rows for rank 0 first). Rank `q` receives them in slot `r` of `recv`
    /// (elements `r * cap_rows * row_len ..`) and the count in `recv_counts[r]`. `send_counts` and
    /// `recv_counts` hold `world` entries; `recv` holds `world * cap_rows * row_len` elements. A count above
    /// `cap_rows` traps the kernel (a device error). For the combine, call it again with the received
    /// counts as the send counts.
    #[allow(clippy::too_many_arguments)]
    pub fn all_to_all<'a, T: DeviceCopy>(
        &'a mut self,
        send: &'a SymBuffer<T>,
        send_counts: &'a SymBuffer<u32>,
        recv: &'a mut SymBuffer<T>,
        recv_counts: &'a mut SymBuffer<u32>,
        row_len: usize,
        cap_rows: usize,
    ) -> Result<LaunchGuard<'a>, CommError> {
        let world = self.world();
        for (what, len) in
            [("all-to-all send counts", send_counts.len()), ("all-to-all recv counts", recv_counts.len())]
        {
            if len != world {
                return Err(CommError::LengthMismatch { what, expected: world, found: len });
            }
        }
        if recv.len() != world * cap_rows * row_len {
            return Err(CommError::LengthMismatch {
                what: "all-to-all receive buffer (world x cap_rows x row_len)",
                expected: world * cap_rows * row_len,
                found: recv.len(),
            });
        }
        if cap_rows > u32::MAX as usize {
            return Err(CommError::TooLarge {
                what: "all-to-all capacity in rows",
                bytes: cap_rows,
                max: u32::MAX as usize,
                fix: "use fewer rows per slot",
            });
        }
        let row_bytes = row_len * size_of::<T>();
        let slot_bytes = cap_rows * row_bytes;
        let plan = self.exchange_plan(exchange_mode::ALL_TO_ALL, 0, row_bytes, slot_bytes, cap_rows);
        let buffers = ExchangeBuffers {
            src: Some(send.bytes()),
            send_counts: Some(send_counts),
            dst: recv.bytes_mut(),
            recv_counts: Some(recv_counts),
        };
        self.launch_exchange(slot_bytes, plan, buffers)
    }

    fn exchange_plan(
        &self,
        mode: u32,
        root: usize,
        row_bytes: usize,
        slot_bytes: usize,
        cap_rows: usize,
    ) -> ExchangePlan {
        ExchangePlan {
            mode,
            root: root as u32,
            row_bytes: row_bytes as u64,
            slot_bytes: slot_bytes as u64,
            cap_rows: cap_rows as u64,
            slot: 0,
        }
    }

    /// Launches the exchange kernel of the transport for messages of up to `max_bytes` bytes.
    fn launch_exchange<'a>(
        &'a mut self,
        max_bytes: usize,
        mut plan: ExchangePlan,
        b: ExchangeBuffers<'a>,
    ) -> Result<LaunchGuard<'a>, CommError> {
        let transport = self.exchange_transport(max_bytes);
        let t = &self.tuning;
        let vectors = max_bytes.div_ceil(VECTOR_BYTES);
        let team = self.team;
        let guard = match transport {
            ExchangeTransport::Ll => {
                debug_assert!(ll_slot_packets(max_bytes) <= self.ll_slot_packets);
                plan.slot = self.ll_slot_packets as u64;
                let cfg = LaunchConfig::new(t.ll_blocks_for(vectors, t.ll_threads, t.max_blocks), t.ll_threads);
                let (ll, pad) = (&mut self.ll, &self.one_shot_pad);
                exchange::exchange_ll::launch(team, cfg, b.src, b.send_counts, b.dst, b.recv_counts, ll, pad, plan)?
            }
            ExchangeTransport::Staged => {
                plan.slot = self.stage_slot_vectors as u64;
                let cfg = LaunchConfig::new(t.ll_blocks_for(vectors, t.threads, t.max_blocks), t.threads);
                let (stage, pad) = (&mut self.stage, &self.one_shot_pad);
                exchange::exchange_staged::launch(
                    team,
                    cfg,
                    b.src,
                    b.send_counts,
                    b.dst,
                    b.recv_counts,
                    stage,
                    pad,
                    plan,
                )?
            }
            ExchangeTransport::Direct => {
                let cfg = LaunchConfig::new(t.blocks_for(vectors, t.threads, t.max_blocks), t.threads)
                    .with_shared_bytes(t.staging_for(max_bytes));
                let pad = &self.exchange_pad;
                exchange::exchange_direct::launch(team, cfg, b.src, b.send_counts, b.dst, b.recv_counts, pad, plan)?
            }
        };
        Ok(guard)
    }
}

/// The caller's buffers of an exchange, borrowed as the kernels use them: `src` (bytes) and `send_counts`
/// read, `dst` (bytes) and `recv_counts` written; the counts for an all-to-all only.
struct ExchangeBuffers<'a> {
    src: Option<ByteView<'a>>,
    send_counts: Option<&'a SymBuffer<u32>>,
    dst: ByteViewMut<'a>,
    recv_counts: Option<&'a mut SymBuffer<u32>>,
}
