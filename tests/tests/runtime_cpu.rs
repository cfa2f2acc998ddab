//! The host runtime without a GPU: error messages, argument and size checks, emulated teams and their
//! symmetric memory, graph capture rules, and `ferrocomm doctor` where there is no driver.

use std::time::Duration;

use ferrocomm::{Backend, Device, Error, LaunchConfig, Link, SignalPadBuffer, SymBuffer, Team, TeamBuilder, system};
use ferrocomm_device::abi::SIGNAL_PAD_EPOCH_SLOTS;
use ferrocomm_runtime_kernels::host as kernels;

fn emulated(world: usize) -> Team {
    Team::emulated(world).expect("an emulated team needs no GPU")
}

#[test]
fn error_messages_name_the_pair_the_link_and_the_fix() {
    let e = Error::PeerAccess { a: 0, b: 3, link: Link::None };
    let msg = e.to_string();
    assert!(msg.contains("GPU 0 cannot access the memory of GPU 3"), "{msg}");
    assert!(msg.contains("link: none") && msg.contains("ranks_per_gpu") && msg.contains("ferrocomm doctor"), "{msg}");
    assert_eq!(Link::NvLink.to_string(), "NVLink");
    assert_eq!(Link::Pcie.to_string(), "PCIe");

    let e = Error::NotCoResident {
        kernel: "barrier",
        device: Device::Cuda { ordinal: 1 },
        blocks: 600,
        ranks: 2,
        max: 264,
        per_rank: 132,
    };
    let msg = e.to_string();
    assert!(msg.contains("`barrier`") && msg.contains("600 blocks (2 rank(s)) on GPU 1"), "{msg}");
    assert!(msg.contains("at most 132 blocks per rank"), "{msg}");

    let msg = Error::HostTimeout { rank: 1, waited: Duration::from_millis(3000) }.to_string();
    assert!(
        msg.contains("rank 1") && msg.contains("timeout per queued launch + 1 s") && msg.contains("new team"),
        "{msg}"
    );

    for e in [Error::NoDriver, Error::NoGpu] {
        let msg = e.to_string();
        assert!(msg.contains("FERROCOMM_BACKEND=emulator"), "{msg}");
        assert!(!msg.contains('\n'), "one sentence, one line: {msg}");
    }
    let msg = Error::LengthMismatch { relation: "len(dst) == len(src)", left: 3, right: 4 }.to_string();
    assert!(msg.contains("`len(dst) == len(src)`") && msg.contains("3 vs 4"), "{msg}");
}

#[test]
fn launch_configurations_are_checked_before_anything_runs() {
    let ok = LaunchConfig::new(4, 256);
    assert_eq!((ok.blocks(), ok.threads_per_block()), (4, 256));
    assert!(ok.validate("k").is_ok());
    for bad in [
        LaunchConfig::new(0, 32),
        LaunchConfig::new(1, 0),
        LaunchConfig::new(1, 1025),
        LaunchConfig::dims([1, 1, 1], [32, 32, 2]),
        LaunchConfig::dims([1, 1, 1], [1, 1, 65]),
        LaunchConfig::dims([1, 65536, 1], [32, 1, 1]),
    ] {
        let e = bad.validate("k").unwrap_err();
        assert!(matches!(e, Error::BadLaunchConfig { kernel: "k", .. }), "{bad:?}: {e}");
    }
    assert_eq!(LaunchConfig::for_elements(1000, 256).grid, [4, 1, 1]);
    assert_eq!(LaunchConfig::for_elements(0, 256).grid, [1, 1, 1]);
    assert_eq!(LaunchConfig::single().with_shared_bytes(64).shared_bytes, 64);
}

#[test]
fn an_emulated_team_has_one_emulated_gpu_per_rank() {
    let team = emulated(3);
    assert_eq!(team.world(), 3);
    assert_eq!(team.backend(), Backend::Emulator);
    assert_eq!(team.device(2).unwrap(), Device::Emulated { gpu: 2 });
    assert!(matches!(team.device(3), Err(Error::RankOutOfRange { rank: 3, world: 3 })));
    let ranks: Vec<usize> = team.ranks().map(|r| r.rank()).collect();
    assert_eq!(ranks, [0, 1, 2]);
    let shared = TeamBuilder::new().backend(Backend::Emulator).world(4).ranks_per_gpu(2).build().unwrap();
    assert_eq!(shared.device(1).unwrap(), Device::Emulated { gpu: 0 });
    assert_eq!(shared.device(2).unwrap(), Device::Emulated { gpu: 1 });
    assert!(team.synchronize().is_ok());
}

#[test]
fn symmetric_memory_is_zeroed_per_rank_and_copies_round_trip() {
    let team = emulated(2);
    let mut buf = SymBuffer::<u32>::new(&team, 5).unwrap();
    assert_eq!((buf.len(), buf.world()), (5, 2));
    assert_eq!(buf.to_host(0).unwrap(), [0; 5]);
    buf.copy_from_host(1, &[1, 2, 3, 4, 5]).unwrap();
    assert_eq!(buf.to_host(1).unwrap(), [1, 2, 3, 4, 5]);
    assert_eq!(buf.to_host(0).unwrap(), [0; 5], "each rank has its own memory");
    buf.fill(0xdead_beef).unwrap();
    assert_eq!(buf.to_host(0).unwrap(), [0xdead_beef; 5]);
    buf.fill_rank(1, 0x0101_0101).unwrap();
    assert_eq!(buf.to_host(1).unwrap(), [0x0101_0101; 5]);

    let e = buf.copy_from_host(0, &[1, 2]).unwrap_err();
    assert!(matches!(e, Error::LengthMismatch { left: 2, right: 5, .. }), "{e}");
    assert!(matches!(buf.to_host(2), Err(Error::RankOutOfRange { rank: 2, world: 2 })));

    let floats = SymBuffer::from_host(&team, &[1.5f64, -2.0]).unwrap();
    assert_eq!(floats.to_host(1).unwrap(), [1.5, -2.0]);
}

#[test]
fn the_peer_table_holds_every_ranks_base_address() {
    let team = emulated(4);
    let buf = SymBuffer::<u64>::new(&team, 33).unwrap();
    let bases: Vec<u64> = (0..4).map(|r| buf.address(r).unwrap()).collect();
    for rank in 0..4 {
        assert_eq!(buf.peer_table(rank).unwrap(), bases);
        let raw = buf.raw(rank).unwrap();
        assert_eq!((raw.local as u64, raw.len), (bases[rank], 33));
        assert_eq!(buf.raw_slice(rank).unwrap().ptr as u64, bases[rank]);
    }
    for base in &bases {
        assert_eq!(base % 256, 0, "symmetric allocations are 256-byte aligned");
    }
    let mut sorted = bases.clone();
    sorted.dedup();
    assert_eq!(sorted.len(), 4, "every rank has its own allocation");
}

#[test]
fn sizes_are_checked_and_empty_buffers_are_real() {
    let team = emulated(2);
    let e = SymBuffer::<u64>::new(&team, usize::MAX / 2).unwrap_err();
    assert!(matches!(e, Error::SizeOverflow { elem_bytes: 8, .. }), "{e}");
    let mut empty = SymBuffer::<f32>::new(&team, 0).unwrap();
    assert!(empty.is_empty());
    assert_eq!(empty.to_host(1).unwrap(), Vec::<f32>::new());
    empty.copy_from_host(0, &[]).unwrap();
    empty.fill(3.0).unwrap();
    assert_ne!(empty.raw(0).unwrap().local as usize, 0, "an empty buffer still hands kernels a real address");
}

#[test]
fn buffers_of_another_team_are_refused_with_the_reason() {
    let a = emulated(2);
    let b = emulated(2);
    let three = emulated(3);
    let shared_gpu = TeamBuilder::new().backend(Backend::Emulator).world(2).ranks_per_gpu(2).build().unwrap();
    let buf = SymBuffer::<u32>::new(&a, 4).unwrap();
    let rank1 = |t: &Team| buf.check_for(&t.rank(1).unwrap());
    assert!(rank1(&a).is_ok());
    assert!(matches!(rank1(&b), Err(Error::ForeignBuffer { .. })));
    assert!(matches!(
        buf.check_for(&three.rank(0).unwrap()),
        Err(Error::NotSymmetric { buffer_world: 2, team_world: 3 })
    ));
    let e = rank1(&shared_gpu).unwrap_err();
    assert!(
        matches!(
            e,
            Error::WrongDevice { rank: 1, buffer: Device::Emulated { gpu: 1 }, team: Device::Emulated { gpu: 0 } }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("emulated GPU 1"), "{e}");
}

#[test]
fn signal_pads_start_at_zero_and_name_their_signals() {
    let team = emulated(2);
    let mut pad = SignalPadBuffer::new(&team, "ready", 3).unwrap();
    assert_eq!((pad.name(), pad.len()), ("ready", 3));
    assert_eq!(pad.read(1).unwrap(), [0, 0, 0]);
    assert_eq!(pad.epochs(0).unwrap(), vec![0; SIGNAL_PAD_EPOCH_SLOTS]);
    let raw = pad.raw(0).unwrap();
    assert_eq!(raw.len, 3 + SIGNAL_PAD_EPOCH_SLOTS);
    assert_eq!(pad.signal_address(1, 2).unwrap(), pad.memory().address(1).unwrap() + 16);
    assert!(pad.signal_address(0, 3).is_err());
    pad.reset().unwrap();
}

#[test]
fn capture_refuses_host_copies_and_nested_captures() {
    let team = emulated(2);
    let mut buf = SymBuffer::<u32>::new(&team, 2).unwrap();
    let empty = team.capture(|_| Ok(())).unwrap();
    empty.replay().unwrap().wait().unwrap();
    drop(empty);
    let e = team
        .capture(|_| {
            let refused = buf.fill(1).unwrap_err();
            assert!(matches!(refused, Error::Capturing { what: "SymBuffer::fill" }), "{refused}");
            Err(refused)
        })
        .unwrap_err();
    assert!(e.to_string().contains("while a graph is being captured"), "{e}");
    // The failed capture left the team usable.
    buf.fill(7).unwrap();
    assert_eq!(buf.to_host(1).unwrap(), [7, 7]);
    let nested = team.capture(|t| t.capture(|_| Ok(())).map(|_| ())).unwrap_err();
    assert!(matches!(nested, Error::Capturing { .. }), "{nested}");
}

#[test]
fn from_env_picks_gpus_only_when_a_driver_and_a_gpu_exist() {
    if std::env::var_os(ferrocomm::team::BACKEND_ENV).is_some()
        || std::env::var_os(ferrocomm::team::WORLD_ENV).is_some()
    {
        eprintln!("skipped: FERROCOMM_BACKEND / FERROCOMM_WORLD is set, so auto-detection is not what runs");
        return;
    }
    match Team::from_env() {
        Ok(team) => {
            let expect = if system::gpus_available() { Backend::Cuda } else { Backend::Emulator };
            assert_eq!(team.backend(), expect);
        }
        // A GPU machine whose GPUs cannot all reach each other: the error says which pair.
        Err(e @ Error::PeerAccess { .. }) => eprintln!("from_env: {e}"),
        Err(e) => panic!("Team::from_env failed: {e}"),
    }
}

#[test]
fn without_a_driver_cuda_is_an_error_and_doctor_says_so_in_one_sentence() {
    if system::gpus_available() {
        eprintln!("skipped: a GPU is present (gpu_runtime.rs covers the doctor there)");
        return;
    }
    let e = Team::builder().backend(Backend::Cuda).build().unwrap_err();
    assert!(matches!(e, Error::NoDriver | Error::NoGpu | Error::DriverTooOld { .. }), "{e}");
    let mut out = Vec::new();
    let sentence = ferrocomm_cli::doctor::run(&mut out).unwrap_err();
    // Only NVSHMEM's part, which needs no GPU, is printed before the sentence.
    let printed = String::from_utf8(out).unwrap();
    assert!(printed.lines().all(|l| l.starts_with("NVSHMEM: ") || l.starts_with("  ")), "{printed}");
    assert!(!sentence.contains('\n') && (sentence.contains("driver") || sentence.contains("GPU")), "{sentence}");
}

#[test]
fn launch_params_lower_to_the_kernel_abi_of_each_rank() {
    use ferrocomm::LaunchParam;
    use ferrocomm_device::{SignalPad, SymSlice, SymSliceMut};
    let team = emulated(2);
    let mut buf = SymBuffer::<u32>::new(&team, 10).unwrap();
    let pad = SignalPadBuffer::new(&team, "p", 1).unwrap();
    let r1 = team.rank(1).unwrap();
    let slice = <&[u32] as LaunchParam>::lower(&&buf, &r1).unwrap();
    assert_eq!((slice.ptr as u64, slice.len), (buf.address(1).unwrap(), 10));
    let sym = <SymSlice<u32> as LaunchParam>::lower(&&buf, &r1).unwrap();
    assert_eq!((sym.local as u64, sym.len), (buf.address(1).unwrap(), 10));
    let sym_mut = <SymSliceMut<u32> as LaunchParam>::lower(&&mut buf, &r1).unwrap();
    assert_eq!(sym_mut.local, sym.local);
    let pad_raw = <SignalPad as LaunchParam>::lower(&&pad, &r1).unwrap();
    assert_eq!(pad_raw.len, 1 + SIGNAL_PAD_EPOCH_SLOTS);
    assert_eq!(<f32 as LaunchParam>::lower(&1.5, &r1).unwrap(), 1.5);
    assert_eq!(<bool as LaunchParam>::lower(&true, &r1).unwrap(), 1);
    let other = emulated(2);
    let e = <&mut [u32] as LaunchParam>::lower(&&mut buf, &other.rank(0).unwrap()).unwrap_err();
    assert!(matches!(e, Error::ForeignBuffer { .. }), "{e}");
}

#[test]
fn a_launch_with_another_teams_buffer_runs_nothing() {
    let (a, b) = (emulated(2), emulated(2));
    let mut buf = SymBuffer::<u32>::new(&a, 8).unwrap();
    let e = kernels::stamp_rank(&b, LaunchConfig::new(1, 8), &mut buf).unwrap_err();
    assert!(matches!(e, Error::ForeignBuffer { .. }), "{e}");
    assert_eq!(buf.to_host(1).unwrap(), [0; 8]);
    kernels::stamp_rank(&a, LaunchConfig::new(1, 8), &mut buf).unwrap().wait().unwrap();
    assert_eq!(buf.to_host(1).unwrap()[7], 1_000_007);
}

#[test]
fn a_device_panic_names_every_rank_and_line_and_the_emulated_team_goes_on() {
    let team = emulated(2);
    let mut buf = SymBuffer::<u32>::new(&team, 8).unwrap();
    let e = kernels::out_of_bounds(&team, LaunchConfig::new(1, 32), &mut buf).unwrap().wait().unwrap_err();
    assert!(e.is_kernel_panic(), "{e}");
    let ranks: Vec<usize> = e.device_errors().iter().map(|d| d.rank()).collect();
    assert_eq!(ranks, [0, 1]);
    for d in e.device_errors() {
        let ferrocomm::DeviceError::KernelPanic { at, location, .. } = d else { panic!("{d}") };
        assert_eq!((at.block, at.thread), ([0, 0, 0], [0, 0, 0]));
        assert!(location.file.ends_with("body.rs") && location.line > 0, "{location}");
    }
    let msg = e.to_string();
    assert!(msg.contains("panicked at") && msg.contains("and 1 more device error"), "{msg}");
    // The records were cleared, and the team runs the next kernel.
    kernels::stamp_rank(&team, LaunchConfig::new(1, 8), &mut buf).unwrap().wait().unwrap();
    team.synchronize().unwrap();
}

#[test]
fn teams_buffers_guards_and_graphs_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Team>();
    send_sync::<SymBuffer<f32>>();
    send_sync::<SignalPadBuffer>();
    send_sync::<ferrocomm::LaunchGuard<'static>>();
    send_sync::<ferrocomm::TeamGraph<'static>>();
    send_sync::<ferrocomm::ParamPack>();
    // Launches from several threads at once are queued whole, one team launch after another.
    let team = emulated(2);
    let data: Vec<SymBuffer<u32>> = (0..4).map(|_| SymBuffer::new(&team, 64).unwrap()).collect();
    std::thread::scope(|s| {
        for mut buf in data {
            let team = &team;
            s.spawn(move || {
                for _ in 0..5 {
                    kernels::stamp_rank(team, LaunchConfig::new(1, 16), &mut buf).unwrap().wait().unwrap();
                }
                assert_eq!(buf.to_host(1).unwrap()[63], 1_000_063);
            });
        }
    });
}
