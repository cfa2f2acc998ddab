//! `JobEnv::from_lookup`: every launcher, the precedence of `FERROCOMM_*`, every bad input.

use std::collections::HashMap;
use std::net::SocketAddr;

use ferrocomm_bootstrap::{BootstrapError, JobEnv, Launcher};

fn parse(pairs: &[(&str, &str)]) -> Result<Option<JobEnv>, BootstrapError> {
    let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    JobEnv::from_lookup(|k| map.get(k).cloned())
}

fn ok(pairs: &[(&str, &str)]) -> JobEnv {
    parse(pairs).unwrap().expect("a multi-process layout")
}

fn err(pairs: &[(&str, &str)]) -> BootstrapError {
    parse(pairs).expect_err("a bad layout")
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

const TORCHRUN: &[(&str, &str)] = &[
    ("RANK", "3"),
    ("WORLD_SIZE", "8"),
    ("LOCAL_RANK", "1"),
    ("LOCAL_WORLD_SIZE", "2"),
    ("MASTER_ADDR", "127.0.0.1"),
    ("MASTER_PORT", "29500"),
    ("TORCHELASTIC_RUN_ID", "job-1"),
];

fn with(
    base: &[(&'static str, &'static str)],
    extra: &[(&'static str, &'static str)],
) -> Vec<(&'static str, &'static str)> {
    let mut all: Vec<_> = base.iter().filter(|(k, _)| !extra.iter().any(|(e, _)| e == k)).copied().collect();
    all.extend_from_slice(extra);
    all
}

#[test]
fn nothing_set_is_a_single_process() {
    assert_eq!(parse(&[]).unwrap(), None);
    assert_eq!(parse(&[("FERROCOMM_RENDEZVOUS", "127.0.0.1:1"), ("PATH", "/bin")]).unwrap(), None);
    // Empty values count as unset.
    assert_eq!(parse(&[("RANK", ""), ("WORLD_SIZE", " ")]).unwrap(), None);
}

#[test]
fn torchrun() {
    let env = ok(TORCHRUN);
    assert_eq!((env.rank, env.world, env.local_rank, env.local_world), (3, 8, 1, 2));
    assert_eq!(env.launcher, Launcher::Torchrun);
    // One above MASTER_PORT, where torch's own TCPStore listens.
    assert_eq!(env.rendezvous, addr("127.0.0.1:29501"));
    assert_eq!(env.job_key.len(), 16);
    // Every rank of the job derives the same key; another run id makes another.
    assert_eq!(ok(&with(TORCHRUN, &[("RANK", "0"), ("LOCAL_RANK", "0")])).job_key, env.job_key);
    assert_ne!(ok(&with(TORCHRUN, &[("TORCHELASTIC_RUN_ID", "job-2")])).job_key, env.job_key);
    // A host name resolves, to IPv4 first.
    assert_eq!(ok(&with(TORCHRUN, &[("MASTER_ADDR", "localhost")])).rendezvous, addr("127.0.0.1:29501"));
    assert_eq!(ok(&with(TORCHRUN, &[("MASTER_ADDR", "::1")])).rendezvous, addr("[::1]:29501"));
}

#[test]
fn open_mpi() {
    let vars = [
        ("OMPI_COMM_WORLD_RANK", "5"),
        ("OMPI_COMM_WORLD_SIZE", "8"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
        ("OMPI_MCA_ess_base_jobid", "4242"),
    ];
    let env = ok(&vars);
    assert_eq!((env.rank, env.world, env.local_rank, env.local_world), (5, 8, 1, 4));
    assert_eq!(env.launcher, Launcher::OpenMpi);
    assert_eq!(env.rendezvous.ip().to_string(), "127.0.0.1");
    assert!((20000..40000).contains(&env.rendezvous.port()), "{}", env.rendezvous);
    // The same job id gives every rank the same port and key; another job gets another.
    let other_rank = ok(&with(&vars, &[("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_LOCAL_RANK", "0")]));
    assert_eq!((other_rank.rendezvous, &other_rank.job_key), (env.rendezvous, &env.job_key));
    let other_job = ok(&with(&vars, &[("OMPI_MCA_ess_base_jobid", "4243")]));
    assert_ne!(other_job.job_key, env.job_key);
    // PMIx's namespace does as well as a job id; MASTER_ADDR and MASTER_PORT are used when set.
    let pmix = ok(&[&vars[..4], &[("PMIX_NAMESPACE", "prterun-node-1234@1")]].concat());
    assert!((20000..40000).contains(&pmix.rendezvous.port()));
    let master = ok(&with(&vars, &[("MASTER_ADDR", "127.0.0.2"), ("MASTER_PORT", "29500")]));
    assert_eq!(master.rendezvous, addr("127.0.0.2:29501"));
}

#[test]
fn slurm() {
    let vars = [
        ("SLURM_PROCID", "6"),
        ("SLURM_NTASKS", "8"),
        ("SLURM_LOCALID", "2"),
        ("SLURM_TASKS_PER_NODE", "4(x2)"),
        ("SLURM_NODEID", "1"),
        ("SLURM_JOB_ID", "991"),
        ("SLURM_STEP_ID", "0"),
    ];
    let env = ok(&vars);
    assert_eq!((env.rank, env.world, env.local_rank, env.local_world), (6, 8, 2, 4));
    assert_eq!(env.launcher, Launcher::Slurm);
    assert!((20000..40000).contains(&env.rendezvous.port()));
    let next_step = ok(&with(&vars, &[("SLURM_STEP_ID", "1")]));
    assert_ne!(next_step.job_key, env.job_key);
    // --ntasks-per-node alone, and nothing at all (every task on one node).
    let per_node = [&vars[..3], &[("SLURM_NTASKS_PER_NODE", "4"), ("SLURM_JOB_ID", "991")]].concat();
    assert_eq!(ok(&per_node).local_world, 4);
    let one_node = [&vars[..3], &[("SLURM_JOB_ID", "991")]].concat();
    assert_eq!(ok(&one_node).local_world, 8);
}

#[test]
fn explicit_variables() {
    let env = ok(&[("FERROCOMM_RANK", "1"), ("FERROCOMM_WORLD_SIZE", "3"), ("FERROCOMM_RENDEZVOUS", "127.0.0.1:4000")]);
    assert_eq!(env.launcher, Launcher::Explicit);
    // Without local variables every rank is on this host.
    assert_eq!((env.rank, env.world, env.local_rank, env.local_world), (1, 3, 1, 3));
    assert_eq!(env.rendezvous, addr("127.0.0.1:4000"));
    // The same job key as a layout set by code on the same rendezvous.
    assert_eq!(env.job_key, JobEnv::explicit(0, 3, 0, 3, addr("127.0.0.1:4000")).unwrap().job_key);
    let local = ok(&[
        ("FERROCOMM_RANK", "3"),
        ("FERROCOMM_WORLD_SIZE", "4"),
        ("FERROCOMM_LOCAL_RANK", "1"),
        ("FERROCOMM_LOCAL_WORLD_SIZE", "2"),
        ("FERROCOMM_RENDEZVOUS", "localhost:4000"),
    ]);
    assert_eq!((local.local_rank, local.local_world, local.rendezvous), (1, 2, addr("127.0.0.1:4000")));
}

#[test]
fn ferrocomm_variables_win() {
    let env = ok(&with(
        TORCHRUN,
        &[("FERROCOMM_RANK", "0"), ("FERROCOMM_LOCAL_RANK", "0"), ("FERROCOMM_RENDEZVOUS", "127.0.0.1:7000")],
    ));
    assert_eq!((env.rank, env.local_rank, env.world), (0, 0, 8));
    assert_eq!(env.rendezvous, addr("127.0.0.1:7000"));
    assert_eq!(env.launcher, Launcher::Torchrun);
    // FERROCOMM_RENDEZVOUS stands in for MASTER_ADDR / MASTER_PORT.
    let no_master: Vec<_> = TORCHRUN.iter().filter(|(k, _)| !k.starts_with("MASTER")).copied().collect();
    assert_eq!(ok(&with(&no_master, &[("FERROCOMM_RENDEZVOUS", "127.0.0.1:7000")])).rendezvous, addr("127.0.0.1:7000"));
    // `srun torchrun ...` and `mpirun` in an allocation: the inner launcher counts.
    let nested = with(TORCHRUN, &[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "1"), ("SLURM_LOCALID", "0")]);
    assert_eq!(ok(&nested).launcher, Launcher::Torchrun);
}

fn message(e: &BootstrapError) -> String {
    e.to_string()
}

#[test]
fn bad_numbers_name_the_variable_and_value() {
    let e = err(&with(TORCHRUN, &[("RANK", "three")]));
    assert!(matches!(&e, BootstrapError::BadVar { var: "RANK", value, .. } if value == "three"), "{e:?}");
    assert!(message(&e).contains("RANK=\"three\"") && message(&e).contains("set RANK to a number"), "{e}");
    let e = err(&with(TORCHRUN, &[("WORLD_SIZE", "0"), ("LOCAL_WORLD_SIZE", "0"), ("RANK", "0"), ("LOCAL_RANK", "0")]));
    assert!(matches!(e, BootstrapError::BadVar { var: "WORLD_SIZE", .. }), "{e:?}");
    let e = err(&with(TORCHRUN, &[("MASTER_PORT", "port")]));
    assert!(matches!(e, BootstrapError::BadVar { var: "MASTER_PORT", .. }), "{e:?}");
    let e = err(&with(TORCHRUN, &[("MASTER_PORT", "65535")]));
    assert!(
        matches!(e, BootstrapError::BadVar { var: "MASTER_PORT", .. }) && message(&e).contains("FERROCOMM_RENDEZVOUS"),
        "{e}"
    );
    let e = err(&with(TORCHRUN, &[("FERROCOMM_RENDEZVOUS", "no-port")]));
    assert!(matches!(e, BootstrapError::BadVar { var: "FERROCOMM_RENDEZVOUS", .. }), "{e:?}");
    let e = err(&with(TORCHRUN, &[("FERROCOMM_LOCAL_RANK", "-1")]));
    assert!(matches!(e, BootstrapError::BadVar { var: "FERROCOMM_LOCAL_RANK", .. }), "{e:?}");
}

#[test]
fn layouts_that_do_not_add_up() {
    let e = err(&with(TORCHRUN, &[("RANK", "8")]));
    assert!(matches!(e, BootstrapError::RankOutOfRange { rank: 8, world: 8, .. }), "{e:?}");
    assert!(message(&e).contains("RANK=8, WORLD_SIZE=8"), "{e}");
    let e = err(&with(TORCHRUN, &[("LOCAL_RANK", "2")]));
    assert!(
        matches!(e, BootstrapError::BadLayout { .. })
            && message(&e).contains("LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"),
        "{e}"
    );
    let e = err(&with(TORCHRUN, &[("LOCAL_WORLD_SIZE", "9")]));
    assert!(message(&e).contains("LOCAL_WORLD_SIZE=9 is more than WORLD_SIZE=8"), "{e}");
    // The names in the message are those the values came from.
    let e = err(&with(TORCHRUN, &[("FERROCOMM_RANK", "9")]));
    assert!(message(&e).contains("FERROCOMM_RANK=9, WORLD_SIZE=8"), "{e}");
    let addr = addr("127.0.0.1:1");
    assert!(matches!(
        JobEnv::explicit(2, 2, 0, 1, addr),
        Err(BootstrapError::RankOutOfRange { rank: 2, world: 2, .. })
    ));
    assert!(matches!(JobEnv::explicit(0, 2, 1, 1, addr), Err(BootstrapError::BadLayout { .. })));
    assert!(matches!(JobEnv::explicit(0, 2, 0, 3, addr), Err(BootstrapError::BadLayout { .. })));
}

#[test]
fn partial_launcher_variables() {
    let e = err(&[("RANK", "0")]);
    assert!(
        matches!(&e, BootstrapError::MissingVar { launcher: Launcher::Torchrun, missing: "WORLD_SIZE", present, .. } if present == "RANK is"),
        "{e:?}"
    );
    assert!(message(&e).contains("torchrun job: RANK is set but WORLD_SIZE is not"), "{e}");
    let e = err(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "1")]);
    assert!(matches!(e, BootstrapError::MissingVar { missing: "LOCAL_RANK", .. }), "{e:?}");
    let e = err(&with(TORCHRUN, &[("MASTER_ADDR", "")]));
    assert!(matches!(e, BootstrapError::MissingVar { missing: "MASTER_ADDR", .. }), "{e:?}");
    let e = err(&with(TORCHRUN, &[("MASTER_PORT", "")]));
    assert!(matches!(e, BootstrapError::MissingVar { missing: "MASTER_PORT", .. }), "{e:?}");
    let e = err(&[("OMPI_COMM_WORLD_SIZE", "4")]);
    assert!(
        matches!(e, BootstrapError::MissingVar { launcher: Launcher::OpenMpi, missing: "OMPI_COMM_WORLD_RANK", .. }),
        "{e:?}"
    );
    let e = err(&[("SLURM_PROCID", "0"), ("SLURM_LOCALID", "0")]);
    assert!(
        matches!(e, BootstrapError::MissingVar { launcher: Launcher::Slurm, missing: "SLURM_NTASKS", .. }),
        "{e:?}"
    );
    let e = err(&[("FERROCOMM_LOCAL_RANK", "0")]);
    assert!(matches!(e, BootstrapError::MissingVar { missing: "FERROCOMM_RANK", .. }), "{e:?}");
    let e = err(&[("FERROCOMM_RANK", "0"), ("FERROCOMM_WORLD_SIZE", "2"), ("FERROCOMM_LOCAL_RANK", "0")]);
    assert!(matches!(e, BootstrapError::MissingVar { missing: "FERROCOMM_LOCAL_WORLD_SIZE", .. }), "{e:?}");
}

#[test]
fn a_rendezvous_is_needed() {
    // Explicit variables and an MPI job without a job id have no rendezvous to derive.
    let e = err(&[("FERROCOMM_RANK", "0"), ("FERROCOMM_WORLD_SIZE", "2")]);
    assert!(matches!(e, BootstrapError::MissingVar { missing: "FERROCOMM_RENDEZVOUS", .. }), "{e:?}");
    assert!(message(&e).contains("set FERROCOMM_RENDEZVOUS=host:port"), "{e}");
    let mpi = [
        ("OMPI_COMM_WORLD_RANK", "0"),
        ("OMPI_COMM_WORLD_SIZE", "2"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
    ];
    let e = err(&mpi);
    assert!(
        matches!(e, BootstrapError::MissingVar { launcher: Launcher::OpenMpi, missing: "FERROCOMM_RENDEZVOUS", .. }),
        "{e:?}"
    );
}

#[test]
fn a_master_addr_that_does_not_resolve() {
    // The .invalid domain never resolves (RFC 6761), so resolvers answer at once.
    let e = err(&with(TORCHRUN, &[("MASTER_ADDR", "no-such-host.invalid")]));
    assert!(
        matches!(&e, BootstrapError::Unresolvable { var: "MASTER_ADDR", value, .. } if value == "no-such-host.invalid:29501"),
        "{e:?}"
    );
    let e = err(&with(TORCHRUN, &[("FERROCOMM_RENDEZVOUS", "no-such-host.invalid:1")]));
    assert!(matches!(e, BootstrapError::Unresolvable { var: "FERROCOMM_RENDEZVOUS", .. }), "{e:?}");
}
