//! The rendezvous with ranks as threads: joining, all-gather, barrier, local ranks, and every way it
//! fails — each failure on every rank that can be told, never a hang.

mod common;

use std::time::{Duration, Instant};

use common::{envs, listener, run_all, spawn};
use ferrocomm_bootstrap::{BootstrapError, JobEnv, Rendezvous};

const LONG: Duration = Duration::from_secs(5);
const SHORT: Duration = Duration::from_millis(300);

#[test]
fn four_ranks_gather_and_barrier() {
    let (l, addr) = listener();
    let results = run_all(envs(addr, &["a", "a", "b", "b"]), l, LONG, |rdv| {
        let rdv = rdv.unwrap();
        let rank = rdv.rank();
        assert_eq!(rdv.world(), 4);
        let names = rdv.all_gather("names", format!("rank {rank}").as_bytes()).unwrap();
        rdv.barrier("after names").unwrap();
        // Sizes that differ per rank, empty and large ones included.
        let big = vec![rank as u8; rank * 300_000];
        let sizes: Vec<usize> = rdv.all_gather("big", &big).unwrap().iter().map(Vec::len).collect();
        (rank, rdv.local_ranks().to_vec(), names, sizes)
    });
    for (rank, local, names, sizes) in results {
        assert_eq!(local, if rank < 2 { vec![0, 1] } else { vec![2, 3] }, "rank {rank}");
        let expected: Vec<Vec<u8>> = (0..4).map(|r| format!("rank {r}").into_bytes()).collect();
        assert_eq!(names, expected);
        assert_eq!(sizes, [0, 300_000, 600_000, 900_000]);
    }
}

#[test]
fn rank_zero_connects_like_the_others() {
    // Rank 0 binds the port itself here (the normal path); the free port is found by binding port 0.
    let (l, addr) = listener();
    drop(l);
    let handles: Vec<_> = (0..3)
        .map(|rank| {
            let env = JobEnv::explicit(rank, 3, rank, 3, addr).unwrap();
            std::thread::spawn(move || {
                let rdv = Rendezvous::connect(&env, LONG).unwrap();
                assert_eq!(rdv.local_ranks(), [0, 1, 2]); // one real host
                rdv.all_gather("ranks", &[rank as u8]).unwrap()
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), [[0], [1], [2]]);
    }
}

#[test]
fn a_job_of_one() {
    let env = JobEnv::explicit(0, 1, 0, 1, "127.0.0.1:9".parse().unwrap()).unwrap();
    let rdv = Rendezvous::connect(&env, SHORT).unwrap();
    assert_eq!(rdv.all_gather("solo", b"x").unwrap(), [b"x"]);
    rdv.barrier("solo").unwrap();
    assert_eq!(rdv.local_ranks(), [0]);
}

#[test]
fn a_rank_that_never_joins() {
    let (l, addr) = listener();
    let mut all = envs(addr, &["h"; 4]);
    all.remove(2);
    let start = Instant::now();
    let results = run_all(all, l, SHORT, |rdv| rdv.map(drop));
    for result in results {
        let e = result.unwrap_err();
        assert!(matches!(&e, BootstrapError::NeverJoined { missing, .. } if missing == &[2]), "{e:?}");
        assert!(e.to_string().contains("ranks [2] never joined"), "{e}");
    }
    assert!(start.elapsed() < Duration::from_secs(3), "took {:?}", start.elapsed());
}

#[test]
fn mismatched_world_sizes() {
    let (l, addr) = listener();
    let mut all = envs(addr, &["h"; 2]);
    all[1] = JobEnv::explicit(1, 3, 1, 2, addr).unwrap();
    all[1].host = "h".into();
    for result in run_all(all, l, LONG, |rdv| rdv.map(drop)) {
        let e = result.unwrap_err();
        assert!(matches!(e, BootstrapError::WorldMismatch { rank: 1, says: 3, expected: 2 }), "{e:?}");
    }
}

#[test]
fn duplicate_ranks() {
    // Both ranks 1 are told, and rank 0, though rank 2 never comes: the job cannot work anyway.
    let (l, addr) = listener();
    let mut all = envs(addr, &["h"; 3]);
    all[2] = all[1].clone();
    for result in run_all(all, l, LONG, |rdv| rdv.map(drop)) {
        let e = result.unwrap_err();
        assert!(matches!(e, BootstrapError::DuplicateRank { rank: 1 }), "{e:?}");
    }
}

#[test]
fn a_rank_out_of_range() {
    let (l, addr) = listener();
    let mut all = envs(addr, &["h"; 2]);
    all[1].rank = 5; // past JobEnv's own checks, as a foreign implementation might send
    for result in run_all(all, l, LONG, |rdv| rdv.map(drop)) {
        let e = result.unwrap_err();
        assert!(matches!(e, BootstrapError::RankOutOfRange { rank: 5, world: 2, .. }), "{e:?}");
    }
}

#[test]
fn a_local_layout_that_does_not_add_up() {
    let (l, addr) = listener();
    let mut all = envs(addr, &["h"; 3]);
    all[2].local_rank = 1;
    for result in run_all(all.clone(), l, LONG, |rdv| rdv.map(drop)) {
        let e = result.unwrap_err();
        assert!(matches!(&e, BootstrapError::LayoutMismatch { host, .. } if host == "h"), "{e:?}");
        assert!(e.to_string().contains("ranks 1 and 2 both have local rank 1"), "{e}");
    }
    // Two ranks that say they are alone on a host they share.
    let (l, addr) = listener();
    let mut all = envs(addr, &["h"; 2]);
    all[1].local_rank = 0;
    all[1].local_world = 1;
    all[0].local_world = 1;
    for result in run_all(all, l, LONG, |rdv| rdv.map(drop)) {
        let e = result.unwrap_err();
        assert!(e.to_string().contains("rank 0 says 1 ranks run there, but 2 do"), "{e}");
    }
}

#[test]
fn a_process_of_another_job_is_turned_away() {
    let (l, addr) = listener();
    let mut all = envs(addr, &["h"; 2]);
    all[1].job_key = "another-job".into();
    let results = run_all(all, l, SHORT, |rdv| rdv.map(drop));
    let e = results[0].as_ref().unwrap_err();
    assert!(
        matches!(e, BootstrapError::NeverJoined { missing, turned_away, .. } if missing == &[1] && turned_away.len() == 1),
        "{e:?}"
    );
    assert!(e.to_string().contains("is of another job"), "{e}");
    let e = results[1].as_ref().unwrap_err();
    assert!(matches!(e, BootstrapError::JobMismatch { rank: 1, says, .. } if says == "another-job"), "{e:?}");
}

#[test]
fn rank_zero_is_unreachable() {
    let (l, addr) = listener();
    drop(l); // nobody listens there now
    let env = JobEnv::explicit(1, 2, 1, 2, addr).unwrap();
    let e = Rendezvous::connect(&env, SHORT).unwrap_err();
    assert!(
        matches!(e, BootstrapError::RendezvousUnreachable { rank: 1, addr: a, waited, .. } if a == addr && waited >= SHORT),
        "{e:?}"
    );
}

#[test]
fn a_rank_dropping_mid_gather_is_named() {
    let (l, addr) = listener();
    let results = run_all(envs(addr, &["h"; 4]), l, LONG, |rdv| {
        let rdv = rdv.unwrap();
        rdv.all_gather("first", b"x").unwrap();
        if rdv.rank() == 2 {
            return None; // drops its rendezvous: its connection closes
        }
        let start = Instant::now();
        let e = rdv.all_gather("second", b"y").unwrap_err();
        // Failed, not hung until the timeout; and every later operation fails too.
        assert!(start.elapsed() < LONG, "{:?}", start.elapsed());
        assert!(matches!(rdv.barrier("third"), Err(BootstrapError::Broken { during: "third", .. })));
        Some(e)
    });
    for e in results.into_iter().flatten() {
        assert!(matches!(e, BootstrapError::PeerLost { rank: 2, during: "second" }), "{e:?}");
    }
}

#[test]
fn rank_zero_dropping_is_named() {
    let (l, addr) = listener();
    let results = run_all(envs(addr, &["h"; 3]), l, LONG, |rdv| {
        let rdv = rdv.unwrap();
        rdv.barrier("first").unwrap();
        (rdv.rank() != 0).then(|| rdv.all_gather("second", b"y").unwrap_err())
    });
    for e in results.into_iter().flatten() {
        assert!(matches!(e, BootstrapError::PeerLost { rank: 0, during: "second" }), "{e:?}");
    }
}

#[test]
fn a_rank_that_is_late_times_the_operation_out() {
    let (l, addr) = listener();
    let results = run_all(envs(addr, &["h"; 3]), l, LONG, |rdv| {
        let rdv = rdv.unwrap();
        rdv.set_timeout(SHORT);
        assert_eq!(rdv.timeout(), SHORT);
        if rdv.rank() == 2 {
            std::thread::sleep(SHORT * 3);
        }
        rdv.all_gather("late", b"z").unwrap_err()
    });
    for e in results {
        assert!(matches!(&e, BootstrapError::Timeout { during: "late", missing, .. } if missing == &[2]), "{e:?}");
    }
}

#[test]
fn ranks_calling_different_operations() {
    let (l, addr) = listener();
    let results = run_all(envs(addr, &["h"; 2]), l, LONG, |rdv| {
        let rdv = rdv.unwrap();
        if rdv.rank() == 0 { rdv.all_gather("a", b"") } else { rdv.barrier("b").map(|()| Vec::new()) }.unwrap_err()
    });
    for e in results {
        assert!(
            matches!(&e, BootstrapError::Diverged { rank: 1, says, with: 0, expected } if says == "b" && expected == "a"),
            "{e:?}"
        );
    }
}

#[test]
fn host_is_for_rank_zero() {
    let (l, addr) = listener();
    let env = JobEnv::explicit(1, 2, 1, 2, addr).unwrap();
    let e = spawn(env, Some(l), SHORT, |rdv| rdv.unwrap_err()).join().unwrap();
    assert!(matches!(e, BootstrapError::BadLayout { .. }), "{e:?}");
}
