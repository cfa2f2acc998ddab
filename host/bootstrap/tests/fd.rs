//! The file-descriptor mesh: between threads, across fake hosts, its failures, and between real
//! processes (this test binary started again as ranks 1 and 2).

mod common;

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::FileExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{envs, listener, run_all};
use ferrocomm_bootstrap::{BootstrapError, FdMesh, JobEnv, Rendezvous};
use nix::sys::memfd::{MFdFlags, memfd_create};

const LONG: Duration = Duration::from_secs(5);

/// A memfd holding `text`.
fn memfd(text: &str) -> File {
    let mut f = File::from(memfd_create("ferrocomm-test", MFdFlags::MFD_CLOEXEC).unwrap());
    f.write_all(text.as_bytes()).unwrap();
    f
}

/// What a received descriptor's file holds (read at offset 0: the offset is shared with the sender).
fn contents(fd: OwnedFd) -> String {
    let f = File::from(fd);
    let mut buf = vec![0; 256];
    let n = f.read_at(&mut buf, 0).unwrap();
    String::from_utf8(buf[..n].to_vec()).unwrap()
}

#[test]
fn threads_exchange_memfds() {
    let (l, addr) = listener();
    let results = run_all(envs(addr, &["h"; 3]), l, LONG, |rdv| {
        let rdv = rdv.unwrap();
        let mesh = FdMesh::connect(&rdv).unwrap();
        assert_eq!(mesh.local_ranks(), [0, 1, 2]);
        let mine = memfd(&format!("rank {}", rdv.rank()));
        let first: Vec<Option<String>> =
            mesh.exchange("memfds", mine.as_fd(), b"memfd").unwrap().into_iter().map(|fd| fd.map(contents)).collect();
        // A second exchange, of pipes: what one rank writes, the one it sent the pipe to can read.
        let (mut read, write) = std::io::pipe().unwrap();
        let writers = mesh.exchange("pipes", write.as_fd(), b"pipe writer").unwrap();
        drop(write);
        let next = (rdv.rank() + 1) % 3;
        let mut to_next = File::from(writers.into_iter().nth(next).unwrap().unwrap());
        to_next.write_all(format!("from {}", rdv.rank()).as_bytes()).unwrap();
        drop(to_next);
        rdv.barrier("written").unwrap();
        // Only the previous rank wrote to this rank's pipe, in one write shorter than PIPE_BUF.
        let mut buf = [0u8; 64];
        let n = read.read(&mut buf).unwrap();
        (rdv.rank(), first, String::from_utf8(buf[..n].to_vec()).unwrap())
    });
    for (rank, first, got) in results {
        for (peer, text) in first.into_iter().enumerate() {
            assert_eq!(text, (peer != rank).then(|| format!("rank {peer}")), "rank {rank} from {peer}");
        }
        assert_eq!(got, format!("from {}", (rank + 2) % 3));
    }
}

#[test]
fn a_mesh_per_host() {
    let (l, addr) = listener();
    let results = run_all(envs(addr, &["a", "b", "a", "b"]), l, LONG, |rdv| {
        let rdv = rdv.unwrap();
        let mesh = FdMesh::connect(&rdv).unwrap();
        let mine = memfd(&format!("rank {}", rdv.rank()));
        let got: Vec<Option<String>> =
            mesh.exchange("memfds", mine.as_fd(), b"m").unwrap().into_iter().map(|fd| fd.map(contents)).collect();
        (rdv.rank(), mesh.local_ranks().to_vec(), got)
    });
    for (rank, local, got) in results {
        let peer = rank ^ 2;
        assert_eq!(local, [rank.min(peer), rank.max(peer)]);
        let me = local.iter().position(|&r| r == rank).unwrap();
        assert!(got[me].is_none());
        assert_eq!(got[1 - me].as_deref(), Some(format!("rank {peer}").as_str()));
    }
}

#[test]
fn different_tags_are_named() {
    let (l, addr) = listener();
    let results = run_all(envs(addr, &["h"; 2]), l, LONG, |rdv| {
        let rdv = rdv.unwrap();
        let mesh = FdMesh::connect(&rdv).unwrap();
        let tag: &[u8] = if rdv.rank() == 0 { b"buffer" } else { &[0xff, 0x01] };
        let e = mesh.exchange("SymBuffer::new #3", memfd("x").as_fd(), tag).unwrap_err();
        let again = mesh.exchange("again", memfd("x").as_fd(), tag).unwrap_err();
        assert!(matches!(again, BootstrapError::Broken { .. }), "{again:?}");
        (rdv.rank(), e)
    });
    for (rank, e) in results {
        assert!(
            matches!(&e, BootstrapError::TagMismatch { rank: r, peer, .. } if *r == rank && *peer == 1 - rank),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(text.contains("SymBuffer::new #3") && text.contains("\"buffer\"") && text.contains("0xff01"), "{text}");
    }
}

#[test]
fn a_closed_peer_is_named() {
    let (l, addr) = listener();
    let results = run_all(envs(addr, &["h"; 2]), l, LONG, |rdv| {
        let rdv = rdv.unwrap();
        let mesh = FdMesh::connect(&rdv).unwrap();
        let tag = b"t";
        assert!(mesh.exchange("long tag", memfd("x").as_fd(), &[0; 2000]).is_err());
        if rdv.rank() == 1 {
            drop(mesh);
            return None;
        }
        Some(mesh.exchange("after the drop", memfd("x").as_fd(), tag).unwrap_err())
    });
    let e = results[0].as_ref().unwrap();
    assert!(matches!(e, BootstrapError::PeerLost { rank: 1, during: "after the drop" }), "{e:?}");
}

#[test]
fn a_rank_that_cannot_listen_is_named() {
    let (l, addr) = listener();
    let all = envs(addr, &["h"; 2]);
    // Someone else holds rank 0's socket name.
    let name = SocketAddr::from_abstract_name(format!("ferrocomm-{}-0", all[0].job_key)).unwrap();
    let _squatter = UnixListener::bind_addr(&name).unwrap();
    for e in run_all(all, l, LONG, |rdv| FdMesh::connect(&rdv.unwrap()).unwrap_err()) {
        assert!(
            matches!(&e, BootstrapError::MeshSetup { rank: 0, detail, .. } if detail.contains("listening")),
            "{e:?}"
        );
    }
}

#[test]
fn a_peer_that_does_not_take_part_times_out() {
    let (l, addr) = listener();
    let results = run_all(envs(addr, &["h"; 2]), l, LONG, |rdv| {
        let rdv = rdv.unwrap();
        let mesh = FdMesh::connect(&rdv).unwrap();
        mesh.set_timeout(Duration::from_millis(300));
        if rdv.rank() == 1 {
            std::thread::sleep(Duration::from_millis(900));
            return None;
        }
        Some(mesh.exchange("lonely", memfd("x").as_fd(), b"t").unwrap_err())
    });
    let e = results[0].as_ref().unwrap();
    assert!(matches!(e, BootstrapError::Timeout { during: "lonely", missing, .. } if missing == &[1]), "{e:?}");
}

/// Set in the environment of the processes `processes_exchange_memfds` starts.
const CHILD: &str = "FERROCOMM_TEST_FD_CHILD";

/// Kills and reaps the children however the test ends, so none outlives it.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn processes_exchange_memfds() {
    let (l, addr) = listener();
    let world = 3;
    let children: Vec<Child> = (1..world)
        .map(|rank| {
            Command::new(std::env::current_exe().unwrap())
                .args(["--ignored", "--exact", "fd_child", "--nocapture", "--test-threads=1"])
                // Whatever launcher runs the tests, the children are an explicit job of their own.
                .env_remove("RANK")
                .env_remove("WORLD_SIZE")
                .env_remove("LOCAL_RANK")
                .env_remove("LOCAL_WORLD_SIZE")
                .env_remove("OMPI_COMM_WORLD_RANK")
                .env_remove("OMPI_COMM_WORLD_SIZE")
                .env_remove("OMPI_COMM_WORLD_LOCAL_RANK")
                .env_remove("OMPI_COMM_WORLD_LOCAL_SIZE")
                .env_remove("SLURM_PROCID")
                .env(CHILD, "1")
                .env("FERROCOMM_LOCAL_RANK", rank.to_string())
                .env("FERROCOMM_LOCAL_WORLD_SIZE", world.to_string())
                .env("FERROCOMM_RANK", rank.to_string())
                .env("FERROCOMM_WORLD_SIZE", world.to_string())
                .env("FERROCOMM_RENDEZVOUS", addr.to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut children = Children(children);
    let pids: Vec<u32> = children.0.iter().map(Child::id).collect();
    let env = JobEnv::explicit(0, world, 0, world, addr).unwrap();
    let got = (|| -> Result<Vec<Option<String>>, BootstrapError> {
        let rdv = Rendezvous::host(&env, l, LONG)?;
        let mesh = FdMesh::connect(&rdv)?;
        let mine = memfd(&format!("rank 0 pid {}", std::process::id()));
        let got = mesh.exchange("memfds", mine.as_fd(), b"memfd")?.into_iter().map(|fd| fd.map(contents)).collect();
        rdv.barrier("read")?;
        Ok(got)
    })();
    // Every child exits within its own timeouts; the guard kills any that would not.
    let deadline = Instant::now() + LONG * 3;
    for (rank, c) in (1..).zip(&mut children.0) {
        let status = loop {
            if let Some(status) = c.try_wait().unwrap() {
                break Some(status);
            }
            if Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let (mut out, mut err) = (String::new(), String::new());
        if status.is_some() {
            c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
            c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        }
        assert!(
            status.is_some_and(|s| s.success()),
            "rank {rank} failed ({status:?}):\n{out}\n{err}\nrank 0 got {got:?}"
        );
    }
    let got = got.unwrap();
    assert_eq!(got[0], None);
    for rank in 1..world {
        assert_eq!(got[rank].as_deref(), Some(format!("rank {rank} pid {}", pids[rank - 1]).as_str()));
    }
}

/// A child of `processes_exchange_memfds`; on its own (no `CHILD` variable) it has nothing to do.
#[test]
#[ignore = "the entry point of a spawned rank: run by its parent test"]
fn fd_child() {
    if std::env::var_os(CHILD).is_none() {
        eprintln!("skipped: fd_child plays a rank of processes_exchange_memfds");
        return;
    }
    let env = JobEnv::from_env().unwrap().expect("the parent sets FERROCOMM_*");
    let rdv = Rendezvous::connect(&env, LONG).unwrap();
    let mesh = FdMesh::connect(&rdv).unwrap();
    let mine = memfd(&format!("rank {} pid {}", env.rank, std::process::id()));
    let got = mesh.exchange("memfds", mine.as_fd(), b"memfd").unwrap();
    for (peer, fd) in got.into_iter().enumerate() {
        match fd {
            None => assert_eq!(peer, env.rank),
            Some(fd) => {
                let text = contents(fd);
                assert!(text.starts_with(&format!("rank {peer} pid ")), "{text}");
                // A real descriptor of another process's file, not one of this process.
                assert!(!text.ends_with(&format!(" pid {}", std::process::id())), "{text}");
            }
        }
    }
    rdv.barrier("read").unwrap();
}
