//! Kernel parameters beyond one typed buffer per argument: optional buffers (`Option<&[T]>` and the other
//! buffer kinds wrapped in `Option`) and byte views ([`ByteView`], [`ByteViewMut`]: a buffer of any element
//! type passed to a kernel's `u8` buffer argument that `#[kernel(bytes(...))]` marks).
//!
//! An optional buffer lowers `None` to a null address of length 0, which the device side turns back into
//! `None`; a real buffer always has a non-null address (even an empty one), so `Some` stays `Some`.

use std::marker::PhantomData;
use std::mem::size_of;

use ferrocomm_device::abi::{RawSlice, RawSym};
use ferrocomm_device::{DeviceParam, SymSlice, SymSliceMut};

use super::param::LaunchParam;
use crate::error::Error;
use crate::memory::{DeviceCopy, SymBuffer};
use crate::team::RankRef;

fn no_slice<T>() -> RawSlice<T> {
    RawSlice { ptr: std::ptr::null_mut(), len: 0 }
}

fn no_sym<T>() -> RawSym<T> {
    RawSym { peers: std::ptr::null(), local: std::ptr::null_mut(), len: 0 }
}

impl<T: DeviceCopy> LaunchParam for Option<&[T]> {
    type Host<'a> = Option<&'a SymBuffer<T>>;

    fn lower(host: &Option<&SymBuffer<T>>, rank: &RankRef<'_>) -> Result<RawSlice<T>, Error> {
        match host {
            Some(buf) => <&[T] as LaunchParam>::lower(buf, rank),
            None => Ok(no_slice()),
        }
    }
}

impl<T: DeviceCopy> LaunchParam for Option<&mut [T]> {
    type Host<'a> = Option<&'a mut SymBuffer<T>>;

    fn lower(host: &Option<&mut SymBuffer<T>>, rank: &RankRef<'_>) -> Result<RawSlice<T>, Error> {
        match host {
            Some(buf) => <&mut [T] as LaunchParam>::lower(buf, rank),
            None => Ok(no_slice()),
        }
    }
}

impl<T: DeviceCopy> LaunchParam for Option<SymSlice<T>> {
    type Host<'a> = Option<&'a SymBuffer<T>>;

    fn lower(host: &Option<&SymBuffer<T>>, rank: &RankRef<'_>) -> Result<RawSym<T>, Error> {
        match host {
            Some(buf) => <SymSlice<T> as LaunchParam>::lower(buf, rank),
            None => Ok(no_sym()),
        }
    }
}

impl<T: DeviceCopy> LaunchParam for Option<SymSliceMut<T>> {
    type Host<'a> = Option<&'a mut SymBuffer<T>>;

    fn lower(host: &Option<&mut SymBuffer<T>>, rank: &RankRef<'_>) -> Result<RawSym<T>, Error> {
        match host {
            Some(buf) => <SymSliceMut<T> as LaunchParam>::lower(buf, rank),
            None => Ok(no_sym()),
        }
    }
}

/// What a byte view needs of its buffer, whatever the element type.
trait Bytes {
    fn check_for(&self, rank: &RankRef<'_>) -> Result<(), Error>;
    fn raw_bytes(&self, rank: usize) -> Result<RawSym<u8>, Error>;
    fn byte_len(&self) -> usize;
}

impl<T: DeviceCopy> Bytes for SymBuffer<T> {
    fn check_for(&self, rank: &RankRef<'_>) -> Result<(), Error> {
        SymBuffer::check_for(self, rank)
    }

    fn raw_bytes(&self, rank: usize) -> Result<RawSym<u8>, Error> {
        let raw = self.raw(rank)?;
        Ok(RawSym { peers: raw.peers.cast(), local: raw.local.cast(), len: raw.len * size_of::<T>() })
    }

    fn byte_len(&self) -> usize {
        self.len() * size_of::<T>()
    }
}

/// A buffer of any element type, read as bytes by a kernel's `&[u8]` or `SymSlice<u8>` argument marked
/// `#[kernel(bytes(name))]`: [`SymBuffer::bytes`]. Borrows the buffer shared for its lifetime, so the
/// launch guard keeps it borrowed as a typed buffer argument would.
#[derive(Clone, Copy)]
pub struct ByteView<'a> {
    buf: &'a dyn Bytes,
}

/// A buffer of any element type, written as bytes by a kernel's `&mut [u8]` or `SymSliceMut<u8>` argument
/// marked `#[kernel(bytes(name))]`: [`SymBuffer::bytes_mut`]. Borrows the buffer mutably for its lifetime.
pub struct ByteViewMut<'a> {
    /// The same bytes, read-only: lengths and lowering are its; this type only adds the unique borrow.
    view: ByteView<'a>,
    _unique: PhantomData<&'a mut ()>,
}

impl<T: DeviceCopy> SymBuffer<T> {
    /// This buffer as bytes, for a kernel argument that reads bytes (`#[kernel(bytes(...))]`).
    pub fn bytes(&self) -> ByteView<'_> {
        ByteView { buf: self }
    }

    /// This buffer as bytes, for a kernel argument that writes bytes (`#[kernel(bytes(...))]`).
    pub fn bytes_mut(&mut self) -> ByteViewMut<'_> {
        ByteViewMut { view: ByteView { buf: self }, _unique: PhantomData }
    }
}

impl ByteView<'_> {
    /// Bytes in each rank's part.
    pub fn len(&self) -> usize {
        self.buf.byte_len()
    }

    /// Whether each rank's part is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn sym(&self, rank: &RankRef<'_>) -> Result<RawSym<u8>, Error> {
        self.buf.check_for(rank)?;
        self.buf.raw_bytes(rank.rank())
    }
}

impl ByteViewMut<'_> {
    /// Bytes in each rank's part.
    pub fn len(&self) -> usize {
        self.view.len()
    }

    /// Whether each rank's part is empty.
    pub fn is_empty(&self) -> bool {
        self.view.is_empty()
    }

    fn sym(&self, rank: &RankRef<'_>) -> Result<RawSym<u8>, Error> {
        self.view.sym(rank)
    }
}

impl std::fmt::Debug for ByteView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByteView").field("bytes", &self.len()).finish()
    }
}

impl std::fmt::Debug for ByteViewMut<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByteViewMut").field("bytes", &self.len()).finish()
    }
}

fn local(raw: RawSym<u8>) -> RawSlice<u8> {
    RawSlice { ptr: raw.local, len: raw.len }
}

/// A kernel's `u8` buffer argument that takes a [`ByteView`] or [`ByteViewMut`] of a buffer of any element
/// type: what `#[kernel(bytes(name))]` makes the launcher take for `name` (`Host`) and how it becomes the
/// argument's ABI value (`lower`), like [`LaunchParam`] does for typed buffers.
pub trait LaunchBytes: DeviceParam {
    /// What the launcher takes for this parameter.
    type Host<'a>;

    /// This rank's ABI value. Checks that the buffer belongs to the launching team and the rank's device.
    fn lower(host: &Self::Host<'_>, rank: &RankRef<'_>) -> Result<Self::Abi, Error>;
}

impl LaunchBytes for &[u8] {
    type Host<'a> = ByteView<'a>;

    fn lower(host: &ByteView<'_>, rank: &RankRef<'_>) -> Result<RawSlice<u8>, Error> {
        host.sym(rank).map(local)
    }
}

impl LaunchBytes for &mut [u8] {
    type Host<'a> = ByteViewMut<'a>;

    fn lower(host: &ByteViewMut<'_>, rank: &RankRef<'_>) -> Result<RawSlice<u8>, Error> {
        host.sym(rank).map(local)
    }
}

impl LaunchBytes for SymSlice<u8> {
    type Host<'a> = ByteView<'a>;

    fn lower(host: &ByteView<'_>, rank: &RankRef<'_>) -> Result<RawSym<u8>, Error> {
        host.sym(rank)
    }
}

impl LaunchBytes for SymSliceMut<u8> {
    type Host<'a> = ByteViewMut<'a>;

    fn lower(host: &ByteViewMut<'_>, rank: &RankRef<'_>) -> Result<RawSym<u8>, Error> {
        host.sym(rank)
    }
}

impl LaunchBytes for Option<&[u8]> {
    type Host<'a> = Option<ByteView<'a>>;

    fn lower(host: &Option<ByteView<'_>>, rank: &RankRef<'_>) -> Result<RawSlice<u8>, Error> {
        host.as_ref().map_or(Ok(no_slice()), |view| view.sym(rank).map(local))
    }
}

impl LaunchBytes for Option<&mut [u8]> {
    type Host<'a> = Option<ByteViewMut<'a>>;

    fn lower(host: &Option<ByteViewMut<'_>>, rank: &RankRef<'_>) -> Result<RawSlice<u8>, Error> {
        host.as_ref().map_or(Ok(no_slice()), |view| view.sym(rank).map(local))
    }
}

impl LaunchBytes for Option<SymSlice<u8>> {
    type Host<'a> = Option<ByteView<'a>>;

    fn lower(host: &Option<ByteView<'_>>, rank: &RankRef<'_>) -> Result<RawSym<u8>, Error> {
        host.as_ref().map_or(Ok(no_sym()), |view| view.sym(rank))
    }
}

impl LaunchBytes for Option<SymSliceMut<u8>> {
    type Host<'a> = Option<ByteViewMut<'a>>;

    fn lower(host: &Option<ByteViewMut<'_>>, rank: &RankRef<'_>) -> Result<RawSym<u8>, Error> {
        host.as_ref().map_or(Ok(no_sym()), |view| view.sym(rank))
    }
}
