//! NVSHMEM: how a team's kernels reach GPUs that loads and stores cannot (other nodes, over IBGDA or IB RC).
//!
//! A team built with [`TeamBuilder::nvshmem`](crate::TeamBuilder::nvshmem) opens NVSHMEM's host library at
//! run time (the runtime builds and runs where it is absent), initialises it through its unique-id
//! bootstrap — rank 0's id carried to every rank over ferrocomm's own rendezvous — and then:
//! - allocates every symmetric buffer and signal pad from NVSHMEM's symmetric heap (`nvshmem_malloc`); each
//!   rank's peer table holds `nvshmem_ptr` of every peer (null where only remote puts reach it);
//! - loads each kernels crate's NVSHMEM flavour (the builder's link with `libnvshmem_device.bc`) and binds
//!   it with `nvshmemx_cumodule_init`, after checking that the bitcode's NVSHMEM is the host library's;
//! - loads a crate built without that flavour only when every peer is load/store reachable, else refuses
//!   the launch ([`Error::NvshmemUnreachable`]).
//!
//! Ranks are NVSHMEM's PEs: rank `r` initialises as PE `r`, so a kernel's peer rank is its PE.
//!
//! | variable | effect |
//! | --- | --- |
//! | `FERROCOMM_NVSHMEM_LIB` | `libnvshmem_host.so.3`, or the directory holding it (checked first) |
//! | `NVSHMEM_HOME` | an NVSHMEM installation: `$NVSHMEM_HOME/lib/libnvshmem_host.so.3` |
//! | (none) | the `nvidia-nvshmem-cu13` wheel in each Python's site-packages, then the soname on `LD_LIBRARY_PATH` |
//! | `NVSHMEM_SYMMETRIC_SIZE` | NVSHMEM's heap per PE (its default: 1 GiB) |
//! | `NVSHMEM_REMOTE_TRANSPORT` | `ibgda`, `ibrc` (NVSHMEM's default), `ucx`, `libfabric`, `none` |

mod sys;

use std::ffi::c_void;
use std::fmt;
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::driver::sys::CUmodule;

use crate::error::Error;
use crate::exec::SymmetricHeap;
use crate::size::parse_size;
pub(crate) use sys::UniqueId;
use sys::{HostLib, INIT_WITH_UNIQUEID, InitAttr};

/// An explicit `libnvshmem_host.so.3`, or the directory holding it.
pub const LIB_ENV: &str = "FERROCOMM_NVSHMEM_LIB";
/// An NVSHMEM installation (`lib/libnvshmem_host.so.3` under it).
pub const HOME_ENV: &str = "NVSHMEM_HOME";
/// The host library's soname.
pub const SONAME: &str = "libnvshmem_host.so.3";
/// NVSHMEM's symmetric heap size per PE (bytes, or with a `K`/`M`/`G`/`T` suffix).
pub const SYMMETRIC_SIZE_ENV: &str = "NVSHMEM_SYMMETRIC_SIZE";
/// NVSHMEM's heap when [`SYMMETRIC_SIZE_ENV`] is unset (NVSHMEM 3.4's default).
pub const DEFAULT_SYMMETRIC_SIZE: u64 = 1 << 30;
/// The most NVSHMEM's heap grows to (it starts at [`SYMMETRIC_SIZE_ENV`] and grows on demand).
pub const MAX_MEMORY_ENV: &str = "NVSHMEM_MAX_MEMORY_PER_GPU";
/// The transport NVSHMEM uses to reach PEs that P2P cannot.
pub const REMOTE_TRANSPORT_ENV: &str = "NVSHMEM_REMOTE_TRANSPORT";
// The pinned release, the version type and the version a linked module carries are the builder's: it links
// the bitcode and writes the modules this runtime loads, so one definition serves both sides.
pub use ferrocomm_builder::nvshmem::{NvshmemVersion as Version, PINNED_VERSION, PIP_REQUIREMENT, ptx_version};

/// Where the host library is looked for, in order: [`LIB_ENV`] (a file or a directory), [`HOME_ENV`], the
/// `nvidia-nvshmem-cu13` wheel of each Python on `PATH`, and last the bare soname, which the dynamic loader
/// resolves through `LD_LIBRARY_PATH` and the system's paths.
pub fn candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(explicit) = std::env::var_os(LIB_ENV).filter(|v| !v.is_empty()) {
        let path = PathBuf::from(explicit);
        out.push(if path.is_dir() { path.join(SONAME) } else { path });
    }
    if let Some(home) = std::env::var_os(HOME_ENV).filter(|v| !v.is_empty()) {
        out.push(Path::new(&home).join("lib").join(SONAME));
    }
    for dir in python_site_packages() {
        out.push(dir.join("nvidia/nvshmem/lib").join(SONAME));
    }
    out.push(PathBuf::from(SONAME));
    out
}

fn python_site_packages() -> Vec<PathBuf> {
    const ASK: &str = "import site, sysconfig; \
        print('\\n'.join([sysconfig.get_paths()['purelib'], site.getusersitepackages()] + site.getsitepackages()))";
    let mut dirs: Vec<PathBuf> = Vec::new();
    for python in ["python3", "python"] {
        let Ok(out) = Command::new(python).args(["-c", ASK]).output() else { continue };
        for line in String::from_utf8_lossy(&out.stdout).lines().map(str::trim).filter(|l| !l.is_empty()) {
            let dir = PathBuf::from(line);
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
    }
    dirs
}

/// Opens the first candidate that loads ([`candidates`]); the error lists what was tried and why each
/// failed.
fn open_host_library() -> Result<HostLib, Error> {
    let mut tried = Vec::new();
    for path in candidates() {
        // A path that is not there is not worth a dlopen (its error would only say so); the bare soname is.
        if path.components().count() > 1 && !path.exists() {
            tried.push(format!("{} (absent)", path.display()));
            continue;
        }
        match HostLib::open(&path) {
            Ok(lib) => return Ok(lib),
            Err(why) => tried.push(format!("{} ({why})", path.display())),
        }
    }
    Err(Error::NvshmemMissing { tried: tried.join("; ") })
}

/// What `ferrocomm doctor` reports: the host library found, its release, the transport and bootstrap
/// plugins beside it, and the heap each PE will get.
#[derive(Debug, Clone)]
pub struct NvshmemInfo {
    /// The library that loaded.
    pub library: PathBuf,
    /// Its release (`nvshmemx_vendor_get_version_info`).
    pub version: Version,
    /// The OpenSHMEM specification it implements (`nvshmem_info_get_version`).
    pub openshmem: (u32, u32),
    /// Transport plugins beside it (`ibgda`, `ibrc`, `ucx`, ...): how it can reach other nodes.
    pub transports: Vec<String>,
    /// The transport plugins the dynamic loader cannot load here, with its error (a library they need is
    /// missing, such as UCX's for `ucx`): NVSHMEM cannot use those. One that loads may still find no
    /// network device when a team starts.
    pub unloadable: Vec<(String, String)>,
    /// Bootstrap plugins beside it (`uid` is the one ferrocomm uses).
    pub bootstraps: Vec<String>,
    /// `NVSHMEM_REMOTE_TRANSPORT`, when set.
    pub remote_transport: Option<String>,
    /// The symmetric heap per PE, in bytes.
    pub heap_bytes: u64,
    /// Whether [`NvshmemInfo::heap_bytes`] comes from `NVSHMEM_SYMMETRIC_SIZE` (else NVSHMEM's default).
    pub heap_from_env: bool,
}

/// Finds and opens the host library without initialising it, and says what it offers.
pub fn probe() -> Result<NvshmemInfo, Error> {
    let lib = open_host_library()?;
    let ((major, minor, patch), openshmem) = lib.versions();
    // The soname alone has no directory: ask the loader where it found it.
    let dir = loaded_from(&lib.path).and_then(|p| p.parent().map(Path::to_owned));
    let plugins = |prefix: &str| -> Vec<String> {
        let Some(dir) = &dir else { return Vec::new() };
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .filter_map(|n| n.strip_prefix(prefix).and_then(|r| r.split_once(".so")).map(|(name, _)| name.to_owned()))
            .collect();
        names.sort();
        names
    };
    let (heap_bytes, heap_from_env) = heap_size()?;
    let (transports, bootstraps) = (plugins("nvshmem_transport_"), plugins("nvshmem_bootstrap_"));
    let unloadable = transports
        .iter()
        .filter_map(|name| {
            let dir = dir.as_ref()?;
            let file = std::fs::read_dir(dir).ok()?.filter_map(Result::ok).map(|e| e.path()).find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("nvshmem_transport_{name}.so")))
            })?;
            // Lazy binding: what fails is a library the plugin needs, not a symbol NVSHMEM provides later.
            // SAFETY: loading runs the plugin's initialisers, which NVSHMEM's own loading runs as well.
            let opened = unsafe { libloading::os::unix::Library::open(Some(&file), libloading::os::unix::RTLD_LAZY) };
            opened.err().map(|e| (name.clone(), e.to_string()))
        })
        .collect();
    Ok(NvshmemInfo {
        library: dir.map_or_else(|| lib.path.clone(), |d| d.join(SONAME)),
        version: Version { major, minor, patch },
        openshmem,
        transports,
        unloadable,
        bootstraps,
        remote_transport: std::env::var(REMOTE_TRANSPORT_ENV).ok().filter(|v| !v.is_empty()),
        heap_bytes,
        heap_from_env,
    })
}

/// The file the dynamic loader opened for `path` (from `/proc/self/maps`), for a bare soname.
fn loaded_from(path: &Path) -> Option<PathBuf> {
    if path.is_absolute() {
        return Some(path.to_owned());
    }
    let name = path.file_name()?.to_str()?;
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().filter_map(|l| l.split_whitespace().nth(5)).find(|p| p.ends_with(name)).map(PathBuf::from)
}

/// NVSHMEM's heap per PE: `NVSHMEM_SYMMETRIC_SIZE` parsed as NVSHMEM does (bytes, or a `K`, `M`, `G` or
/// `T` suffix of powers of 1024), else its default; and whether it came from the variable.
pub fn heap_size() -> Result<(u64, bool), Error> {
    match std::env::var(SYMMETRIC_SIZE_ENV) {
        Ok(v) if !v.trim().is_empty() => parse_size(&v).map(|b| (b, true)).map_err(|_| Error::BadEnv {
            var: SYMMETRIC_SIZE_ENV,
            value: v,
            expected: "a size in bytes, or with a K, M, G or T suffix (e.g. 2G)",
        }),
        _ => Ok((DEFAULT_SYMMETRIC_SIZE, false)),
    }
}

/// The running NVSHMEM of a team: initialised when the team is made, finalised when it is dropped. One per
/// process, as NVSHMEM is.
pub(crate) struct Nvshmem {
    /// Unloaded only once NVSHMEM is finalised: an abandoned NVSHMEM's threads run its code to the end.
    lib: ManuallyDrop<HostLib>,
    /// This process's PE (its team rank) and the number of PEs (the team's world).
    pub rank: usize,
    pub world: usize,
    pub version: Version,
    /// Per PE: whether this PE's loads and stores reach it (`nvshmem_ptr` of a heap address is not null).
    pub reachable: Vec<bool>,
    /// Heap bytes handed out and live, for the heap error's arithmetic.
    live: Mutex<Vec<(u64, usize)>>,
    /// A PE's process is gone ([`SymmetricHeap::abandon`]): the collective calls of the teardown would wait for it
    /// forever, so they are not made.
    abandoned: AtomicBool,
}

impl fmt::Debug for Nvshmem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Nvshmem")
            .field("library", &self.lib.path)
            .field("version", &self.version)
            .field("rank", &self.rank)
            .field("world", &self.world)
            .field("reachable", &self.reachable)
            .finish_non_exhaustive()
    }
}

/// A fresh unique id (rank 0 makes it; every rank initialises with it), from the host library.
pub(crate) fn unique_id() -> Result<UniqueId, Error> {
    let lib = open_host_library()?;
    let mut id = UniqueId::new();
    // SAFETY: an out-parameter of the library's own type.
    let status = unsafe { (lib.get_uniqueid)(&mut id) };
    if status != 0 {
        return Err(Error::NvshmemCall { call: "nvshmemx_get_uniqueid", status, hint: "" });
    }
    Ok(id)
}

impl Nvshmem {
    /// Initialises NVSHMEM as PE `rank` of `world` with rank 0's unique id, on the CUDA context current on
    /// this thread (the caller binds the rank's).
    pub fn init(rank: usize, world: usize, id: &UniqueId) -> Result<Nvshmem, Error> {
        let lib = open_host_library()?;
        let ((major, minor, patch), _) = lib.versions();
        let version = Version { major, minor, patch };
        // SAFETY: no arguments.
        let status = unsafe { (lib.init_status)() };
        // NVSHMEM_STATUS_IS_INITIALIZED, _LIMITED_MPG, _FULL_MPG (nvshmem_constants.h).
        if (2..=4).contains(&status) {
            return Err(Error::TeamConfig {
                reason: "NVSHMEM is already initialised in this process: a process has one NVSHMEM team at a time; \
                         drop the other one first"
                    .into(),
            });
        }
        let mut attr = InitAttr::new();
        let (me, n) = (rank as i32, world as i32);
        // SAFETY: `id` and `attr` are live values of the library's own layouts; it copies what it keeps.
        let status = unsafe { (lib.set_attr_uniqueid_args)(me, n, id, &mut attr) };
        if status != 0 {
            return Err(Error::NvshmemCall { call: "nvshmemx_set_attr_uniqueid_args", status, hint: "" });
        }
        // SAFETY: as above; the caller made the rank's CUDA context current.
        let status = unsafe { (lib.hostlib_init_attr)(INIT_WITH_UNIQUEID, &mut attr) };
        if status != 0 {
            return Err(Error::NvshmemCall {
                call: "nvshmemx_hostlib_init_attr",
                status,
                hint: "NVSHMEM_DEBUG=INFO says why; on machines without NVLink SHARP set NVSHMEM_DISABLE_NVLS=1, \
                       and without InfiniBand NVSHMEM_REMOTE_TRANSPORT=none",
            });
        }
        // SAFETY: NVSHMEM is initialised.
        let (pe, pes) = unsafe { ((lib.my_pe)(), (lib.n_pes)()) };
        let mut nv = Nvshmem {
            lib: ManuallyDrop::new(lib),
            rank,
            world,
            version,
            reachable: Vec::new(),
            live: Mutex::new(Vec::new()),
            abandoned: AtomicBool::new(false),
        };
        if pe != me || pes != n {
            return Err(Error::TeamConfig {
                reason: format!(
                    "NVSHMEM made rank {rank} of {world} PE {pe} of {pes}; every rank must join with rank 0's id"
                ),
            });
        }
        // Which PEs loads and stores reach: NVSHMEM maps those of this node (NVLink, PCIe P2P) into the heap.
        let probe = nv.malloc(crate::size::ALIGN, "NVSHMEM's reachability probe")?;
        nv.reachable = (0..world).map(|pe| nv.peer_address(probe, pe) != 0).collect();
        nv.free(probe);
        Ok(nv)
    }
}

impl SymmetricHeap for Nvshmem {
    fn rank(&self) -> usize {
        self.rank
    }

    /// `bytes` of NVSHMEM's symmetric heap (collective: every PE allocates the same, in the same order);
    /// the heap error names `NVSHMEM_SYMMETRIC_SIZE` and the size that would fit. Not zeroed.
    fn malloc(&self, bytes: usize, label: &str) -> Result<u64, Error> {
        let live: u64 = self.live.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|&(_, b)| b as u64).sum();
        // An allocation NVSHMEM cannot grow its heap to is refused here, before NVSHMEM sees it: NVSHMEM 3.4's
        // failed growth leaves its heap broken, and its next barrier ends the process. The bound is what the
        // GPU has free (the context of the rank allocating is current) and NVSHMEM_MAX_MEMORY_PER_GPU.
        let free = cudarc::driver::result::mem_get_info().ok().map(|(free, _)| free as u64);
        let most = std::env::var(MAX_MEMORY_ENV).ok().and_then(|v| parse_size(&v).ok());
        let over = free.is_some_and(|f| bytes as u64 > f) || most.is_some_and(|m| live + bytes as u64 > m);
        // SAFETY: NVSHMEM is initialised; the size is a plain count.
        let ptr = if over { std::ptr::null_mut() } else { unsafe { (self.lib.malloc)(bytes) } };
        if ptr.is_null() {
            let (heap, from_env) = heap_size().unwrap_or((DEFAULT_SYMMETRIC_SIZE, false));
            return Err(Error::NvshmemHeapTooSmall {
                label: label.to_owned(),
                bytes: bytes as u64,
                live,
                heap,
                heap_from_env: from_env,
                // Room for what is live, this allocation, and NVSHMEM's own share of the heap.
                suggested: env_size((live + bytes as u64 + heap).next_power_of_two()),
            });
        }
        self.live.lock().unwrap_or_else(|p| p.into_inner()).push((ptr as u64, bytes));
        Ok(ptr as u64)
    }

    /// Frees a [`SymmetricHeap::malloc`] allocation (collective, like the allocation); leaks it once the team is
    /// abandoned.
    fn free(&self, addr: u64) {
        self.live.lock().unwrap_or_else(|p| p.into_inner()).retain(|&(a, _)| a != addr);
        if self.is_abandoned() {
            return;
        }
        // SAFETY: `addr` came from `nvshmem_malloc` and is freed once, after every kernel using it.
        unsafe { (self.lib.free)(addr as *mut c_void) };
    }

    /// Where this PE's loads and stores reach PE `pe`'s copy of the heap address `addr`; 0 when they do not.
    fn peer_address(&self, addr: u64, pe: usize) -> u64 {
        // SAFETY: `addr` is a heap address; `pe` a PE of the team.
        unsafe { (self.lib.ptr)(addr as *const c_void, pe as i32) as u64 }
    }

    /// Binds a loaded module that was linked with NVSHMEM's device library (`nvshmemx_cumodule_init`), after
    /// checking that its bitcode is of this host library's release.
    fn bind_module(&self, module: CUmodule, name: &'static str, ptx: &str) -> Result<(), Error> {
        let Some(bitcode) = ptx_version(ptx) else {
            // The flavour's kernels call no NVSHMEM function: nothing to bind.
            return Ok(());
        };
        if bitcode != self.version {
            return Err(Error::NvshmemVersionMismatch {
                module: name,
                bitcode: bitcode.to_string(),
                host: self.version.to_string(),
                library: self.lib.path.clone(),
            });
        }
        // SAFETY: a module loaded in the current context, which NVSHMEM was initialised on.
        let status = unsafe { (self.lib.cumodule_init)(module) };
        if status != 0 {
            return Err(Error::NvshmemCall { call: "nvshmemx_cumodule_init", status, hint: "" });
        }
        Ok(())
    }

    /// The first PE this one cannot reach with loads and stores, if any.
    fn first_unreachable(&self) -> Option<usize> {
        self.reachable.iter().position(|r| !r)
    }

    /// PEs `gone` have exited: from now on `free` and the finalisation, collective calls that would wait for
    /// them forever, are not made. The heap and NVSHMEM's state are left to the process's end.
    fn abandon(&self, gone: &[usize]) {
        if !self.abandoned.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                "PE(s) {gone:?} exited: PE {} leaves NVSHMEM without freeing its heap or finalising (both wait \
                 for every PE)",
                self.rank
            );
        }
    }

    /// Whether [`SymmetricHeap::abandon`] was called.
    fn is_abandoned(&self) -> bool {
        self.abandoned.load(Ordering::Acquire)
    }
}

impl Drop for Nvshmem {
    fn drop(&mut self) {
        if self.is_abandoned() {
            // Not finalised, so its proxy and bootstrap threads still run the library's code: it stays loaded.
            return;
        }
        // SAFETY: initialised by `init`; every allocation and module of the team is gone (the team drops
        // this last, before its contexts). Finalised, NVSHMEM runs no thread, and `lib` is not used again.
        unsafe {
            (self.lib.hostlib_finalize)();
            ManuallyDrop::drop(&mut self.lib);
        }
    }
}

/// `bytes` as NVSHMEM's size variables take it: a whole number with one suffix (`8G`, `1536M`), which
/// NVSHMEM reads up to its first character after the number, so `8 GiB` would not do.
fn env_size(bytes: u64) -> String {
    for (suffix, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_sizes_read_well_in_errors() {
        assert_eq!(crate::size::format_size(3 << 29), "1.5 GiB");
        assert_eq!(env_size(8 << 30), "8G");
        assert_eq!(env_size(3 << 29), "1536M");
        assert_eq!(env_size(1000), "1000");
    }

    #[test]
    fn the_bitcode_version_is_read_from_the_ptx() {
        let ptx = ".visible .const .align 4 .b8 nvshmemi_device_lib_version_d[12] = {3, 0, 0, 0, 4, 0, 0, 0, 5};";
        assert_eq!(ptx_version(ptx), Some(PINNED_VERSION));
        assert_eq!(ptx_version(".visible .entry k("), None);
    }

    #[test]
    fn unique_ids_round_trip_as_bytes() {
        let mut id = UniqueId::new();
        id.internal[7] = 42;
        let bytes = id.to_bytes();
        assert_eq!(bytes.len(), 128);
        let back = UniqueId::from_bytes(&bytes).unwrap();
        assert_eq!((back.version, back.internal[7]), (id.version, 42));
        assert!(UniqueId::from_bytes(&bytes[1..]).is_none());
    }
}
