//! Device memory that other processes can map: CUDA virtual memory management (VMM) allocations, shareable
//! as POSIX file descriptors. This is how a team that spans processes (one per GPU) builds a symmetric buffer:
//! each process creates its part with [`VmmMapping::create`] and hands the fd of [`VmmMapping::export`] to
//! the other processes of the node (over a Unix socket, SCM_RIGHTS), which map it with [`VmmMapping::import`].
//!
//! The four steps, for an own allocation and for a peer's alike:
//!
//! 1. a physical allocation: `cuMemCreate` (asking for a POSIX-fd-shareable one: this cannot be added later),
//!    or `cuMemImportFromShareableHandle` for a peer's, which gives this process its own handle to it;
//! 2. a range of virtual addresses: `cuMemAddressReserve` (VMM separates address space from memory);
//! 3. the allocation mapped into that range: `cuMemMap`;
//! 4. access for this process's GPU: `cuMemSetAccess` (a fresh mapping is accessible to no device, not even
//!    the one the memory lives on; access to memory on another GPU needs the two to be peers, but no
//!    `cuCtxEnablePeerAccess`).
//!
//! The physical memory is freed only once nothing refers to it any more, in any process: no mapping, no
//! handle (`cuMemRelease` drops one) and no open exported fd. So a process may drop its own mapping while
//! peers still map the memory; they keep it alive.

use std::ffi::{c_int, c_void};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use cudarc::driver::sys::{self, CUresult};
use cudarc::driver::{CudaContext, DriverError, result};

use crate::error::{Error, cuda};
use crate::names::Device;
use crate::system;

/// The only handle type this module creates and imports.
const FD_HANDLE: sys::CUmemAllocationHandleType =
    sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;

/// One mapping of a VMM allocation into this process: its own, or a peer's imported from an fd. Dropping it
/// unmaps the range, frees the addresses and releases this process's handle.
#[derive(Debug)]
pub(crate) struct VmmMapping {
    ptr: u64,
    bytes: usize,
    /// This process's reference to the physical allocation; kept for [`VmmMapping::export`], released on drop.
    handle: sys::CUmemGenericAllocationHandle,
    /// The GPU the mapping is accessible from. Held so that its primary context outlives the mapping, and bound
    /// while the mapping is torn down.
    ctx: Arc<CudaContext>,
}

impl VmmMapping {
    /// Whether GPU `ordinal` supports VMM allocations shareable as POSIX file descriptors (not, for instance,
    /// under WSL).
    pub fn supported(ordinal: usize) -> Result<bool, Error> {
        use sys::CUdevice_attribute as A;
        Ok(system::attribute(ordinal, A::CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED)? != 0
            && system::attribute(ordinal, A::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED)? != 0)
    }

    /// The granularity allocations on `ordinal` are rounded to: the minimum for POSIX-fd-shareable device
    /// memory (2 MiB on current GPUs). Sizes, offsets and the alignment of address ranges must be multiples
    /// of it.
    pub fn granularity(ordinal: usize) -> Result<usize, Error> {
        let prop = allocation_prop(system::cu_device(ordinal)?);
        granularity_of(&prop, Some(Device::Cuda { ordinal }))
    }

    /// `bytes` of device memory on `ctx`'s GPU, rounded up to [`VmmMapping::granularity`] (a zero size gets
    /// one granule), shareable as a POSIX fd, mapped read/write for that GPU and zeroed. Binds `ctx` to the
    /// calling thread (the zeroing needs it current) and leaves it bound.
    pub fn create(ctx: &Arc<CudaContext>, bytes: usize) -> Result<VmmMapping, Error> {
        let ordinal = ctx.ordinal();
        let on = Some(Device::Cuda { ordinal });
        let dev = system::cu_device(ordinal)?;
        ctx.bind_to_thread().map_err(cuda("cuCtxSetCurrent", on))?;
        let prop = allocation_prop(dev);
        let granule = granularity_of(&prop, on)?;
        let bytes = round_up(bytes, granule)?;
        let mut handle = 0;
        // SAFETY: `prop` describes pinned memory on a valid device with the POSIX-fd handle type requested (so
        // that it can be exported later) and `bytes` is a multiple of its granularity; the driver writes one
        // handle, which `map` takes over.
        unsafe { sys::cuMemCreate(&mut handle, bytes, &prop, 0) }.result().map_err(cuda("cuMemCreate", on))?;
        let mapping = VmmMapping::map(ctx, handle, bytes, granule)?;
        // cuMemCreate's memory holds whatever it held before; the runtime's other allocations start zeroed.
        // cuMemsetD8 on device memory may return before it is done, hence the wait on the (legacy) stream it
        // runs on, so that no stream of the runtime (all non-blocking) and no peer process can see the memory
        // before it is zero. On failure, dropping `mapping` undoes everything above.
        // SAFETY: `mapping` covers `bytes` bytes mapped read/write for this GPU, whose context is current, and
        // nobody else knows the memory yet.
        unsafe { result::memset_d8_sync(mapping.ptr, 0, bytes) }.map_err(cuda("cuMemsetD8", on))?;
        // SAFETY: the null stream is the current context's legacy default stream, always valid.
        unsafe { sys::cuStreamSynchronize(std::ptr::null_mut()) }.result().map_err(cuda("cuStreamSynchronize", on))?;
        Ok(mapping)
    }

    /// A new fd for this allocation, which another process of the node can [`import`](VmmMapping::import)
    /// (after receiving it over a Unix socket with SCM_RIGHTS). The caller owns it; while it is open it keeps
    /// the physical memory alive, so close it once it has been sent. It is close-on-exec.
    pub fn export(&self) -> Result<OwnedFd, Error> {
        let on = self.device();
        let mut fd: c_int = -1;
        // SAFETY: for a POSIX-fd handle type the driver writes an `int` through the pointer; `self.handle` is
        // live and was created (or imported) with that handle type.
        unsafe { sys::cuMemExportToShareableHandle((&raw mut fd).cast::<c_void>(), self.handle, FD_HANDLE, 0) }
            .result()
            .map_err(cuda("cuMemExportToShareableHandle", on))?;
        if fd < 0 {
            // Success without an fd: not something the driver documents, but an OwnedFd must not hold -1.
            return Err(Error::Cuda {
                call: "cuMemExportToShareableHandle",
                device: on,
                source: DriverError(CUresult::CUDA_ERROR_UNKNOWN),
            });
        }
        // SAFETY: the driver just opened `fd` for this call; nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // The driver does not say whether it opens the fd close-on-exec; without it, every process this one
        // starts would inherit a reference that keeps the memory alive.
        if let Err(e) = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC)) {
            tracing::warn!("setting close-on-exec on an exported VMM fd: {e}");
        }
        Ok(fd)
    }

    /// Maps a peer's allocation from its exported `fd`, `bytes` long (the exporter's
    /// [`bytes`](VmmMapping::bytes); rounded up to this GPU's granularity), with read/write access for `ctx`'s
    /// GPU, which must be able to reach the memory: the same GPU, or a peer of it. The memory is not zeroed: it
    /// is the peer's. `fd` stays the caller's (the driver does not take it): it may be closed right after, the
    /// mapping holds its own reference. Binds `ctx` to the calling thread and leaves it bound.
    pub fn import(ctx: &Arc<CudaContext>, fd: BorrowedFd<'_>, bytes: usize) -> Result<VmmMapping, Error> {
        let ordinal = ctx.ordinal();
        let on = Some(Device::Cuda { ordinal });
        ctx.bind_to_thread().map_err(cuda("cuCtxSetCurrent", on))?;
        // This GPU's granularity, not the allocation's: the properties of an imported handle name the
        // exporter's device by the exporter's ordinal, which need not mean the same GPU here (or any). GPUs of a
        // node share one granularity in practice; where they do not, cuMemMap below refuses the size.
        let granule = VmmMapping::granularity(ordinal)?;
        let bytes = round_up(bytes, granule)?;
        let mut handle = 0;
        // SAFETY: for a POSIX-fd handle type the driver takes the fd's value cast to a pointer (not a pointer to
        // it), and only reads it; `fd` is open for the duration of the call. The driver writes one handle,
        // which `map` takes over.
        unsafe {
            sys::cuMemImportFromShareableHandle(
                &mut handle,
                std::ptr::without_provenance_mut(fd.as_raw_fd() as usize),
                FD_HANDLE,
            )
        }
        .result()
        .map_err(cuda("cuMemImportFromShareableHandle", on))?;
        VmmMapping::map(ctx, handle, bytes, granule)
    }

    /// The mapping's device address, valid on its GPU.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Its length in bytes (a multiple of the granularity).
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The GPU it is accessible from.
    pub fn ordinal(&self) -> usize {
        self.ctx.ordinal()
    }

    fn device(&self) -> Option<Device> {
        Some(Device::Cuda { ordinal: self.ordinal() })
    }

    /// Steps 2 to 4: reserves `bytes` of addresses aligned to `granule`, maps all of `handle` there (its
    /// first `bytes`) and gives `ctx`'s GPU read/write access. Takes `handle` over: on failure it is
    /// released, and whatever was reserved or mapped undone.
    fn map(
        ctx: &Arc<CudaContext>,
        handle: sys::CUmemGenericAllocationHandle,
        bytes: usize,
        granule: usize,
    ) -> Result<VmmMapping, Error> {
        let ordinal = ctx.ordinal();
        let on = Some(Device::Cuda { ordinal });
        let dev = match system::cu_device(ordinal) {
            Ok(dev) => dev,
            Err(e) => {
                release(handle, on);
                return Err(e);
            }
        };
        let mut ptr = 0;
        // SAFETY: reserves address space only (no fixed address wanted, no flags); writes one pointer.
        if let Err(source) = unsafe { sys::cuMemAddressReserve(&mut ptr, bytes, granule, 0, 0) }.result() {
            release(handle, on);
            return Err(Error::Cuda { call: "cuMemAddressReserve", device: on, source });
        }
        // SAFETY: `ptr..ptr + bytes` was reserved just above and nothing is mapped there; `handle` is live. The
        // driver checks `bytes` against the allocation's size and granularity and fails if it does not fit.
        if let Err(source) = unsafe { sys::cuMemMap(ptr, bytes, 0, handle, 0) }.result() {
            address_free(ptr, bytes, on);
            release(handle, on);
            return Err(Error::Cuda { call: "cuMemMap", device: on, source });
        }
        // From here on the mapping owns everything: dropping it unmaps, frees the range and releases.
        //
        // The handle could be released right away (the mapping alone keeps the physical memory alive, as
        // cuMemRelease documents), but `export` needs it, so it is kept until drop.
        let mapping = VmmMapping { ptr, bytes, handle, ctx: ctx.clone() };
        let access = sys::CUmemAccessDesc {
            location: device_location(dev),
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: `ptr..ptr + bytes` is exactly one mapped range; one descriptor is passed, for a valid device.
        unsafe { sys::cuMemSetAccess(ptr, bytes, &access, 1) }.result().map_err(cuda("cuMemSetAccess", on))?;
        Ok(mapping)
    }
}

impl Drop for VmmMapping {
    fn drop(&mut self) {
        let on = self.device();
        // The VMM calls do not name a context, but the driver may need one current to tear down mappings of
        // this GPU; binding is what cudarc's own allocations do on drop.
        if let Err(e) = self.ctx.bind_to_thread() {
            tracing::error!(
                "binding the context to free a VMM mapping: {}",
                Error::Cuda { call: "cuCtxSetCurrent", device: on, source: e }
            );
        }
        // In this order: a range must be unmapped before its addresses are freed. The handle may go at any
        // point; the physical memory outlives it while a mapping or an exported fd (in any process) remains.
        // SAFETY: this mapping owns `ptr..ptr + bytes`, mapped by `map`; no kernel may use it any more (the
        // owner of the mapping settles its kernels before dropping it).
        if let Err(source) = unsafe { sys::cuMemUnmap(self.ptr, self.bytes) }.result() {
            tracing::error!("freeing a VMM mapping: {}", Error::Cuda { call: "cuMemUnmap", device: on, source });
        }
        address_free(self.ptr, self.bytes, on);
        release(self.handle, on);
    }
}

/// Pinned device memory on `dev`, exportable as a POSIX fd.
fn allocation_prop(dev: sys::CUdevice) -> sys::CUmemAllocationProp {
    sys::CUmemAllocationProp {
        type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: FD_HANDLE,
        location: device_location(dev),
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
            compressionType: 0,
            gpuDirectRDMACapable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    }
}

fn device_location(dev: sys::CUdevice) -> sys::CUmemLocation {
    sys::CUmemLocation { type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: dev }
}

fn granularity_of(prop: &sys::CUmemAllocationProp, on: Option<Device>) -> Result<usize, Error> {
    let mut granule = 0;
    // SAFETY: `prop` is a fully initialised property struct; the driver writes one usize.
    unsafe {
        sys::cuMemGetAllocationGranularity(
            &mut granule,
            prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
        )
    }
    .result()
    .map_err(cuda("cuMemGetAllocationGranularity", on))?;
    if granule == 0 {
        // Never seen; rounding to it would divide by zero.
        return Err(Error::Cuda {
            call: "cuMemGetAllocationGranularity",
            device: on,
            source: DriverError(CUresult::CUDA_ERROR_UNKNOWN),
        });
    }
    Ok(granule)
}

/// `bytes` rounded up to a multiple of `granule`, at least one granule.
fn round_up(bytes: usize, granule: usize) -> Result<usize, Error> {
    bytes.max(1).checked_next_multiple_of(granule).ok_or(Error::SizeOverflow { len: bytes, elem_bytes: 1 })
}

/// Frees a reserved address range (nothing may be mapped in it any more), logging a failure.
fn address_free(ptr: u64, bytes: usize, on: Option<Device>) {
    // SAFETY: callers pass a range they reserved with exactly this size and have unmapped.
    if let Err(source) = unsafe { sys::cuMemAddressFree(ptr, bytes) }.result() {
        tracing::error!(
            "freeing a VMM address range: {}",
            Error::Cuda { call: "cuMemAddressFree", device: on, source }
        );
    }
}

/// Drops this process's reference to a physical allocation, logging a failure.
fn release(handle: sys::CUmemGenericAllocationHandle, on: Option<Device>) {
    // SAFETY: callers own `handle` (from cuMemCreate or an import) and never use it again.
    if let Err(source) = unsafe { sys::cuMemRelease(handle) }.result() {
        tracing::error!("releasing a VMM allocation: {}", Error::Cuda { call: "cuMemRelease", device: on, source });
    }
}

#[cfg(test)]
mod tests {
    //! These need a GPU: without a driver or GPU they print `skipped: ...` and pass, unless
    //! `FERROCOMM_REQUIRE_GPUS=N` (N >= 1) asks for one, which makes a missing GPU a failure.

    use std::io::{IoSlice, IoSliceMut, Read};
    use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
    use std::os::unix::net::UnixStream;
    use std::process::{Child, Command, ExitStatus, Stdio};
    use std::sync::Arc;
    use std::thread::{self, JoinHandle};
    use std::time::{Duration, Instant};

    use cudarc::driver::{CudaContext, result};
    use nix::fcntl::{FcntlArg, FdFlag, fcntl};
    use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};

    use super::{VmmMapping, round_up};
    use crate::system;

    const REQUIRE_ENV: &str = "FERROCOMM_REQUIRE_GPUS";
    /// Set in the child process of `across_processes`: the number of its end of the socket pair.
    const CHILD_SOCKET_ENV: &str = "FERROCOMM_VMM_TEST_CHILD_SOCKET";
    /// The child's test, as the harness names it.
    const CHILD_TEST: &str = "cuda::vmm::tests::across_processes_child";
    /// What the child prints once its writes are done (so that a child that ran no test is not taken for one
    /// that passed).
    const CHILD_DONE: &str = "vmm child: pattern written";
    /// One socket step (sending or receiving the fd).
    const STEP_TIMEOUT: Duration = Duration::from_secs(30);
    /// The whole child process, CUDA initialisation included.
    const CHILD_TIMEOUT: Duration = Duration::from_secs(120);

    /// GPU 0's context, or `None` (with a visible message) where there is no GPU or it cannot share memory
    /// as fds; both are failures when `FERROCOMM_REQUIRE_GPUS` asks for a GPU.
    fn gpu(test: &str) -> Option<Arc<CudaContext>> {
        let present = system::driver().map(|d| d.gpu_count).unwrap_or(0);
        let need = match std::env::var(REQUIRE_ENV) {
            Ok(v) => v.trim().parse().unwrap_or_else(|_| panic!("{REQUIRE_ENV}={v:?} is not a number of GPUs")),
            Err(_) => 0,
        };
        let why = system::driver().err().map(|e| format!(": {e}")).unwrap_or_default();
        assert!(present >= need, "{REQUIRE_ENV}={need} but {present} GPU(s) are usable{why}");
        if present == 0 {
            eprintln!("skipped: no GPU for {test}{why}");
            return None;
        }
        let supported = VmmMapping::supported(0).unwrap_or_else(|e| panic!("{test}: querying VMM support: {e}"));
        if !supported {
            assert!(need == 0, "{REQUIRE_ENV}={need} but GPU 0 has no VMM memory shareable as POSIX fds");
            eprintln!("skipped: GPU 0 has no VMM memory shareable as POSIX fds, needed by {test}");
            return None;
        }
        Some(CudaContext::new(0).unwrap_or_else(|e| panic!("{test}: opening GPU 0: {e}")))
    }

    /// A pattern that does not repeat with any power-of-two period, shifted by `seed`.
    fn pattern(bytes: usize, seed: usize) -> Vec<u8> {
        (0..bytes).map(|i| ((i + seed) % 251) as u8).collect()
    }

    fn write(ctx: &CudaContext, mapping: &VmmMapping, data: &[u8]) {
        assert!(data.len() <= mapping.bytes());
        ctx.bind_to_thread().expect("binding the context");
        // SAFETY: the range lies in the mapping, which is read/write for this context's GPU.
        unsafe { result::memcpy_htod_sync(mapping.ptr(), data) }.expect("cuMemcpyHtoD");
        // cuMemcpyHtoD from pageable memory may return before the data has landed; later copies on the same
        // stream are ordered after it, another process is not.
        ctx.synchronize().expect("cuCtxSynchronize");
    }

    fn read(ctx: &CudaContext, mapping: &VmmMapping, bytes: usize) -> Vec<u8> {
        assert!(bytes <= mapping.bytes());
        let mut out = vec![0u8; bytes];
        ctx.bind_to_thread().expect("binding the context");
        // SAFETY: as for `write`; cuMemcpyDtoH returns once `out` is filled.
        unsafe { result::memcpy_dtoh_sync(&mut out, mapping.ptr()) }.expect("cuMemcpyDtoH");
        out
    }

    /// The index of the first byte where `got` and `want` differ, for a readable failure.
    fn first_difference(got: &[u8], want: &[u8]) -> Option<usize> {
        got.iter()
            .zip(want)
            .position(|(g, w)| g != w)
            .or((got.len() != want.len()).then_some(got.len().min(want.len())))
    }

    #[test]
    fn sizes_round_up_to_whole_granules() {
        const G: usize = 2 << 20;
        assert_eq!(round_up(0, G).unwrap(), G);
        assert_eq!(round_up(1, G).unwrap(), G);
        assert_eq!(round_up(G, G).unwrap(), G);
        assert_eq!(round_up(G + 1, G).unwrap(), 2 * G);
        assert!(round_up(usize::MAX - 1, G).is_err());
    }

    #[test]
    fn create_write_read_back() {
        let Some(ctx) = gpu("create_write_read_back") else { return };
        let granule = VmmMapping::granularity(0).expect("granularity");
        assert!(granule.is_power_of_two(), "granularity {granule}");
        let mapping = VmmMapping::create(&ctx, granule + 1).expect("create");
        assert_eq!(mapping.bytes(), 2 * granule);
        assert_eq!(mapping.ptr() % granule as u64, 0, "the range is aligned to the granularity");
        assert!(read(&ctx, &mapping, mapping.bytes()).iter().all(|&b| b == 0), "fresh memory is zeroed");
        let data = pattern(mapping.bytes(), 0);
        write(&ctx, &mapping, &data);
        let back = read(&ctx, &mapping, mapping.bytes());
        assert_eq!(first_difference(&back, &data), None, "read back what was written");
    }

    #[test]
    fn export_import_in_one_process() {
        let Some(ctx) = gpu("export_import_in_one_process") else { return };
        let own = VmmMapping::create(&ctx, 1 << 20).expect("create");
        let fd = own.export().expect("export");
        let flags = fcntl(&fd, FcntlArg::F_GETFD).expect("F_GETFD");
        assert_ne!(flags & FdFlag::FD_CLOEXEC.bits(), 0, "the exported fd is close-on-exec");
        let other = VmmMapping::import(&ctx, fd.as_fd(), own.bytes()).expect("import");
        // The mapping holds its own reference: the fd is not needed any more.
        drop(fd);
        assert_ne!(own.ptr(), other.ptr(), "a second mapping, at other addresses");
        assert_eq!(other.bytes(), own.bytes());

        let first = pattern(own.bytes(), 1);
        write(&ctx, &own, &first);
        assert_eq!(first_difference(&read(&ctx, &other, other.bytes()), &first), None, "own -> imported");
        let second = pattern(own.bytes(), 2);
        write(&ctx, &other, &second);
        assert_eq!(first_difference(&read(&ctx, &own, own.bytes()), &second), None, "imported -> own");

        // The physical memory outlives the mapping (and handle) it was created with while another maps it.
        drop(own);
        let third = pattern(other.bytes(), 3);
        write(&ctx, &other, &third);
        assert_eq!(first_difference(&read(&ctx, &other, other.bytes()), &third), None, "after the owner's drop");
    }

    /// Kills and reaps the child if the test fails before it has exited.
    struct Reaped(Child);

    impl Drop for Reaped {
        fn drop(&mut self) {
            if let Ok(None) = self.0.try_wait() {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
    }

    fn drain(mut from: impl Read + Send + 'static) -> JoinHandle<String> {
        thread::spawn(move || {
            let mut out = Vec::new();
            let _ = from.read_to_end(&mut out);
            String::from_utf8_lossy(&out).into_owned()
        })
    }

    fn wait_with_timeout(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = child.try_wait().expect("waiting for the child") {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `fd` and the mapping's length over `socket`.
    fn send_fd(socket: &UnixStream, bytes: usize, fd: &OwnedFd) {
        let payload = (bytes as u64).to_le_bytes();
        let fds = [fd.as_raw_fd()];
        let sent = sendmsg::<()>(
            socket.as_raw_fd(),
            &[IoSlice::new(&payload)],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::empty(),
            None,
        )
        .expect("sendmsg");
        assert_eq!(sent, payload.len());
    }

    /// Receives what `send_fd` sent; fails after the socket's read timeout.
    fn receive_fd(socket: &UnixStream) -> (usize, OwnedFd) {
        let mut payload = [0u8; 8];
        let mut space = nix::cmsg_space!([RawFd; 1]);
        let mut iov = [IoSliceMut::new(&mut payload)];
        let msg = recvmsg::<()>(socket.as_raw_fd(), &mut iov, Some(&mut space[..]), MsgFlags::MSG_CMSG_CLOEXEC)
            .expect("recvmsg (timed out, or the parent went away)");
        assert_eq!(msg.bytes, 8, "the mapping's length");
        let mut fds = Vec::new();
        for cmsg in msg.cmsgs().expect("control messages") {
            if let ControlMessageOwned::ScmRights(received) = cmsg {
                fds.extend(received);
            }
        }
        assert_eq!(fds.len(), 1, "one fd");
        // SAFETY: SCM_RIGHTS just installed this fd in this process; nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fds[0]) };
        (u64::from_le_bytes(payload) as usize, fd)
    }

    #[test]
    fn across_processes() {
        let Some(ctx) = gpu("across_processes") else { return };
        let own = VmmMapping::create(&ctx, 1 << 20).expect("create");
        let fd = own.export().expect("export");
        let (parent_end, child_end) = UnixStream::pair().expect("socketpair");
        parent_end.set_write_timeout(Some(STEP_TIMEOUT)).expect("write timeout");
        // std opens sockets close-on-exec; the child's end must survive the exec.
        fcntl(&child_end, FcntlArg::F_SETFD(FdFlag::empty())).expect("clearing FD_CLOEXEC");
        let exe = std::env::current_exe().expect("the test binary");
        let mut child = Command::new(exe)
            .args(["--ignored", "--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
            .env(CHILD_SOCKET_ENV, child_end.as_raw_fd().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting the child");
        let (stdout, stderr) = (drain(child.stdout.take().unwrap()), drain(child.stderr.take().unwrap()));
        let mut child = Reaped(child);
        drop(child_end);

        send_fd(&parent_end, own.bytes(), &fd);
        // The child has its own fd now (SCM_RIGHTS duplicates it into the receiver).
        drop(fd);
        let status = wait_with_timeout(&mut child.0, CHILD_TIMEOUT);
        if status.is_none() {
            let _ = child.0.kill();
            let _ = child.0.wait();
        }
        let output = format!(
            "--- child stdout ---\n{}\n--- child stderr ---\n{}",
            stdout.join().unwrap_or_default(),
            stderr.join().unwrap_or_default()
        );
        let status = status.unwrap_or_else(|| panic!("the child ran past {CHILD_TIMEOUT:?} and was killed\n{output}"));
        assert!(status.success(), "the child failed ({status})\n{output}");
        assert!(output.contains(CHILD_DONE), "the child did not run its test\n{output}");

        let want = pattern(own.bytes(), 7);
        let got = read(&ctx, &own, own.bytes());
        assert_eq!(first_difference(&got, &want), None, "the child's writes are visible here\n{output}");
    }

    /// The child half of `across_processes`; on its own (without the socket variable) it has nothing to do.
    #[test]
    #[ignore = "the entry point of a spawned rank: run by its parent test"]
    fn across_processes_child() {
        let Ok(socket) = std::env::var(CHILD_SOCKET_ENV) else {
            eprintln!("skipped: across_processes_child is the child process of across_processes");
            return;
        };
        let raw: RawFd = socket.trim().parse().unwrap_or_else(|_| panic!("{CHILD_SOCKET_ENV}={socket:?}"));
        // SAFETY: the parent left its end of the pair open across the exec at this number for this test alone.
        let socket = unsafe { UnixStream::from_raw_fd(raw) };
        // The inherited end lost its close-on-exec flag; restore it (best effort).
        let _ = fcntl(&socket, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC));
        socket.set_read_timeout(Some(STEP_TIMEOUT)).expect("read timeout");
        let (bytes, fd) = receive_fd(&socket);
        // The parent found a GPU: a missing one is a failure here, not a skip.
        let ctx = gpu("across_processes_child").expect("the parent process found a usable GPU; this one did not");
        let mapping = VmmMapping::import(&ctx, fd.as_fd(), bytes).expect("import in the child");
        drop(fd);
        assert_eq!(mapping.bytes(), bytes);
        write(&ctx, &mapping, &pattern(bytes, 7));
        println!("{CHILD_DONE}");
    }
}
