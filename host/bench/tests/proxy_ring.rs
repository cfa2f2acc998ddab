//! The proxy's ring without a GPU: the descriptor layout host and kernels share, the index math, and the
//! protocol under load — host threads push descriptors exactly as the kernels' producer does (wait for
//! `tail`, write the slot, release `head`) while the proxy thread pops them.

use std::mem::{align_of, offset_of, size_of};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrocomm_bench::ferro::proxy_thread::{CopyEngine, Proxy};
use ferrocomm_bench::ferro::ring::{Rings, ring_stride};
use ferrocomm_device::queue::{
    HostQueues, RING_HEAD, RING_SLOTS, RING_TAIL, SLOT_BYTES, ring_bytes, ring_has_space, ring_slot, ring_tail_needed,
};
use ferrocomm_kernels::kernels::proxy::ProxyDescriptor;

#[test]
fn descriptor_layout_is_one_line_of_plain_fields() {
    assert_eq!(size_of::<ProxyDescriptor>(), SLOT_BYTES);
    assert_eq!(align_of::<ProxyDescriptor>(), 64);
    let offsets = [
        offset_of!(ProxyDescriptor, src),
        offset_of!(ProxyDescriptor, dst),
        offset_of!(ProxyDescriptor, bytes),
        offset_of!(ProxyDescriptor, signal),
        offset_of!(ProxyDescriptor, value),
        offset_of!(ProxyDescriptor, src_rank),
        offset_of!(ProxyDescriptor, dst_rank),
        offset_of!(ProxyDescriptor, reserved),
    ];
    assert_eq!(offsets, [0, 8, 16, 24, 32, 40, 44, 48]);
    assert_eq!((size_of::<HostQueues>(), align_of::<HostQueues>()), (24, 8));
    // head and tail on lines of their own (the GPU writes one, the host the other), slots after them.
    assert_eq!((RING_HEAD, RING_TAIL, RING_SLOTS), (0, 64, 128));
    assert_eq!(ring_bytes(1), 192);
    assert_eq!(ring_bytes(64), 128 + 64 * 64);
    assert!((1..100).all(|d| ring_stride(d).is_multiple_of(64) && ring_stride(d) >= ring_bytes(d)));
}

#[test]
fn index_math() {
    assert_eq!((ring_slot(0, 4), ring_slot(5, 4), ring_slot(7, 1), ring_slot(10, 3)), (0, 1, 0, 1));
    // Depth 4: the fifth descriptor needs the first popped.
    assert!(ring_has_space(3, 0, 4) && !ring_has_space(4, 0, 4) && ring_has_space(4, 1, 4));
    assert_eq!((ring_tail_needed(0, 4), ring_tail_needed(3, 4), ring_tail_needed(4, 4)), (0, 0, 1));
    // Depth 1: every descriptor waits for the previous one.
    assert!(ring_has_space(0, 0, 1) && !ring_has_space(1, 0, 1));
    assert_eq!(ring_tail_needed(9, 1), 9);
    // A full ring always needs exactly the descriptor that occupies the next slot popped.
    for depth in 1..9u64 {
        for head in depth..40 {
            let tail = ring_tail_needed(head, depth);
            assert!(ring_has_space(head, tail, depth) && !ring_has_space(head, tail - 1, depth));
            assert_eq!(ring_slot(tail - 1, depth), ring_slot(head, depth));
        }
    }
}

/// Records what it is given, slowly enough that the rings fill up.
struct Recorder(Arc<Mutex<Vec<(u32, u64)>>>);

impl CopyEngine for Recorder {
    fn issue(&mut self, d: &ProxyDescriptor, _issued: Option<&ferrocomm_device::emu::Issued>) -> Result<(), String> {
        self.0.lock().unwrap().push((d.src_rank, d.value));
        if d.value.is_multiple_of(64) {
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(())
    }
    fn quiesce(&mut self) -> Result<(), String> {
        Ok(())
    }
    fn describe(&self) -> String {
        "recorder".into()
    }
}

fn descriptor(rank: u32, value: u64) -> ProxyDescriptor {
    ProxyDescriptor { signal: 8, value, src_rank: rank, dst_rank: 1 - rank, ..ProxyDescriptor::default() }
}

/// The kernels' producer on the host: waits for the slot, writes it, publishes `head`.
fn produce(rings: &Rings, rank: usize, count: u64, stop: &AtomicBool) {
    let depth = rings.depth() as u64;
    let mut tail_seen = rings.tail(rank);
    for seq in 0..count {
        while !ring_has_space(seq, tail_seen, depth) {
            assert!(!stop.load(Ordering::Relaxed), "the proxy stopped popping");
            tail_seen = rings.tail(rank);
            std::hint::spin_loop();
        }
        assert!(tail_seen >= ring_tail_needed(seq, depth));
        rings.push_for_test(rank, seq, &descriptor(rank as u32, seq));
    }
}

struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn wait_for(what: &str, deadline: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn every_descriptor_is_served_once_and_in_order_at_every_depth() {
    const COUNT: u64 = 3000;
    for depth in [1, 2, 7, 64] {
        let rings = Arc::new(Rings::host(2, depth).unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut proxy = Proxy::start(Arc::clone(&rings), Box::new(Recorder(Arc::clone(&seen)))).unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            // Set even when the wait below panics, so the producers end and the scope can join them.
            let _stop = StopOnDrop(&stop);
            for rank in 0..2 {
                let (rings, stop) = (&rings, &stop);
                s.spawn(move || produce(rings, rank, COUNT, stop));
            }
            wait_for("the proxy to serve every descriptor", Duration::from_secs(60), || proxy.served() == 2 * COUNT);
        });
        assert_eq!(proxy.stop(), None);
        let seen = seen.lock().unwrap();
        for rank in 0..2 {
            let values: Vec<u64> = seen.iter().filter(|(r, _)| *r == rank).map(|(_, v)| *v).collect();
            assert_eq!(values, (0..COUNT).collect::<Vec<_>>(), "depth {depth}, rank {rank}");
            assert_eq!((rings.head(rank as usize), rings.tail(rank as usize)), (COUNT, COUNT));
        }
    }
}

#[test]
fn a_malformed_descriptor_stops_the_proxy_with_the_reason() {
    let rings = Arc::new(Rings::host(2, 4).unwrap());
    let mut proxy = Proxy::start(Arc::clone(&rings), Box::new(Recorder(Arc::default()))).unwrap();
    rings.push_for_test(0, 0, &descriptor(0, 0));
    rings.push_for_test(0, 1, &ProxyDescriptor { src_rank: 1, ..descriptor(0, 1) });
    wait_for("the proxy to fail", Duration::from_secs(10), || proxy.failure().is_some());
    let failure = proxy.stop().unwrap();
    assert!(failure.contains("descriptor 1 of rank 0") && failure.contains("source rank 1"), "{failure}");
    // The good descriptor was served and its slot released; the bad one was not.
    assert_eq!((proxy.served(), rings.tail(0)), (1, 1));
}
