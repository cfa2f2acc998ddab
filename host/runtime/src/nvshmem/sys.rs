//! NVSHMEM's host library, opened at run time: the C types of its unique-id bootstrap (NVSHMEM 3.4's
//! `nvshmem_types.h`, `nvshmem_uniqueid.h`) and the functions the runtime calls, resolved once.

use std::ffi::{c_int, c_uint, c_void};
use std::path::{Path, PathBuf};

use cudarc::driver::sys::CUmodule;

/// `nvshmemx_uniqueid_t` (v1): 128 bytes, opaque after its version.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct UniqueId {
    pub version: c_int,
    pub internal: [u8; 124],
}

impl UniqueId {
    /// `NVSHMEMX_UNIQUEID_INITIALIZER`.
    pub fn new() -> UniqueId {
        UniqueId { version: (1 << 16) + size_of::<UniqueId>() as c_int, internal: [0; 124] }
    }

    /// The id as bytes, to send to the other ranks.
    pub fn to_bytes(self) -> Vec<u8> {
        let mut out = self.version.to_ne_bytes().to_vec();
        out.extend_from_slice(&self.internal);
        out
    }

    /// The id rank 0 sent, or `None` when `bytes` is not one.
    pub fn from_bytes(bytes: &[u8]) -> Option<UniqueId> {
        if bytes.len() != size_of::<UniqueId>() {
            return None;
        }
        let mut id = UniqueId::new();
        id.version = c_int::from_ne_bytes(bytes[..4].try_into().ok()?);
        id.internal.copy_from_slice(&bytes[4..]);
        Some(id)
    }
}

/// `nvshmemx_uniqueid_args_t` (v1).
#[repr(C)]
struct UniqueIdArgs {
    version: c_int,
    id: *mut UniqueId,
    myrank: c_int,
    nranks: c_int,
}

/// `nvshmemx_init_args_t` (v1).
#[repr(C)]
struct InitArgs {
    version: c_int,
    uid_args: UniqueIdArgs,
    content: [u8; 96],
}

/// `nvshmemx_init_attr_t` (v1), as `NVSHMEMX_INIT_ATTR_INITIALIZER` makes it.
#[repr(C)]
pub(crate) struct InitAttr {
    version: c_int,
    mpi_comm: *mut c_void,
    args: InitArgs,
}

const _: () = assert!(size_of::<UniqueId>() == 128 && size_of::<UniqueIdArgs>() == 24);
const _: () = assert!(size_of::<InitArgs>() == 128 && size_of::<InitAttr>() == 144);

impl InitAttr {
    pub fn new() -> InitAttr {
        InitAttr {
            version: (1 << 16) + size_of::<InitAttr>() as c_int,
            mpi_comm: std::ptr::null_mut(),
            args: InitArgs {
                version: (1 << 16) + size_of::<InitArgs>() as c_int,
                uid_args: UniqueIdArgs {
                    version: (1 << 16) + size_of::<UniqueIdArgs>() as c_int,
                    id: std::ptr::null_mut(),
                    myrank: -1,
                    nranks: -1,
                },
                content: [0; 96],
            },
        }
    }
}

/// `NVSHMEMX_INIT_WITH_UNIQUEID`.
pub(crate) const INIT_WITH_UNIQUEID: c_uint = 1 << 3;

/// The functions of `libnvshmem_host.so.3` the runtime calls. The library stays open as long as this lives.
pub(crate) struct HostLib {
    pub path: PathBuf,
    pub get_uniqueid: unsafe extern "C" fn(*mut UniqueId) -> c_int,
    pub set_attr_uniqueid_args: unsafe extern "C" fn(c_int, c_int, *const UniqueId, *mut InitAttr) -> c_int,
    /// The exported initialiser: the header's `nvshmemx_init_attr` is an inline wrapper around a function the
    /// shared library does not export, and adds only the version stamps [`InitAttr::new`] writes.
    pub hostlib_init_attr: unsafe extern "C" fn(c_uint, *mut InitAttr) -> c_int,
    pub hostlib_finalize: unsafe extern "C" fn(),
    pub init_status: unsafe extern "C" fn() -> c_int,
    pub my_pe: unsafe extern "C" fn() -> c_int,
    pub n_pes: unsafe extern "C" fn() -> c_int,
    pub malloc: unsafe extern "C" fn(usize) -> *mut c_void,
    pub free: unsafe extern "C" fn(*mut c_void),
    pub ptr: unsafe extern "C" fn(*const c_void, c_int) -> *mut c_void,
    pub cumodule_init: unsafe extern "C" fn(CUmodule) -> c_int,
    pub vendor_get_version_info: unsafe extern "C" fn(*mut c_int, *mut c_int, *mut c_int),
    pub info_get_version: unsafe extern "C" fn(*mut c_int, *mut c_int),
    _lib: libloading::Library,
}

impl std::fmt::Debug for HostLib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostLib").field("path", &self.path).finish_non_exhaustive()
    }
}

impl HostLib {
    /// Opens the library at `path` (a file, or a bare soname the dynamic loader searches) and resolves
    /// every function; the error names the first that is missing.
    pub fn open(path: &Path) -> Result<HostLib, String> {
        // SAFETY: loading NVSHMEM's host library runs its initialisers, which only set up its own state.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| e.to_string())?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol is NVSHMEM 3.4's C function of this name, and the field's type is its
                // C signature (host/nvshmem_api.h, host/nvshmemx_api.h).
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| format!("{} has no `{}`: {e}", path.display(), $name))?
            };
        }
        Ok(HostLib {
            path: path.to_owned(),
            get_uniqueid: sym!("nvshmemx_get_uniqueid"),
            set_attr_uniqueid_args: sym!("nvshmemx_set_attr_uniqueid_args"),
            hostlib_init_attr: sym!("nvshmemx_hostlib_init_attr"),
            hostlib_finalize: sym!("nvshmemx_hostlib_finalize"),
            init_status: sym!("nvshmemx_init_status"),
            my_pe: sym!("nvshmem_my_pe"),
            n_pes: sym!("nvshmem_n_pes"),
            malloc: sym!("nvshmem_malloc"),
            free: sym!("nvshmem_free"),
            ptr: sym!("nvshmem_ptr"),
            cumodule_init: sym!("nvshmemx_cumodule_init"),
            vendor_get_version_info: sym!("nvshmemx_vendor_get_version_info"),
            info_get_version: sym!("nvshmem_info_get_version"),
            _lib: lib,
        })
    }

    /// The library's release (`nvshmemx_vendor_get_version_info`) and the OpenSHMEM version it implements
    /// (`nvshmem_info_get_version`); neither needs an initialised NVSHMEM.
    pub fn versions(&self) -> ((u32, u32, u32), (u32, u32)) {
        let (mut major, mut minor, mut patch) = (0, 0, 0);
        let (mut spec_major, mut spec_minor) = (0, 0);
        // SAFETY: out-parameters, written by the library.
        unsafe {
            (self.vendor_get_version_info)(&mut major, &mut minor, &mut patch);
            (self.info_get_version)(&mut spec_major, &mut spec_minor);
        }
        let u = |v: c_int| v.max(0) as u32;
        ((u(major), u(minor), u(patch)), (u(spec_major), u(spec_minor)))
    }
}
