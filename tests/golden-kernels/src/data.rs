//! Entries for data movement, LL packets, 16-bit floats and how a kernel ends.
//!
//! # Safety
//!
//! Every entry dereferences its pointers: launch them with valid device pointers and lengths.

use ferrocomm_device::abi::{RawSlice, RawSym};
use ferrocomm_device::ll::LlPacket;
use ferrocomm_device::ll::{ll_load, ll_store};
use ferrocomm_device::mem::GlobalPtr;
use ferrocomm_device::prelude::*;
use ferrocomm_device::{DeviceParam, error};

/// A kernel argument as `#[kernel]` would convert it.
///
/// # Safety
///
/// `abi` describes live memory of this launch (what the host runtime passes).
unsafe fn arg<T: DeviceParam>(abi: T::Abi) -> T {
    // SAFETY: the launch passes ABI values the host built.
    unsafe { T::from_abi(abi) }
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_ld_v4(p: *const u32, out: *mut [u32; 4]) {
    // SAFETY: the launch passes 16-byte aligned global pointers.
    unsafe { *out = GlobalPtr::from_generic(p).ld_v4() };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_ld_v4_streamed(p: *const u32, out: *mut [u32; 4]) {
    // SAFETY: the launch passes 16-byte aligned global pointers.
    unsafe { *out = GlobalPtr::from_generic(p).ld_v4_streamed() };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_st_v4_kept(p: *mut u32, a: u32, b: u32, c: u32, d: u32) {
    // SAFETY: the launch passes a 16-byte aligned global pointer.
    unsafe { GlobalPtr::from_generic(p).st_v4_kept([a, b, c, d]) };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_st_v4(p: *mut u32, a: u32, b: u32, c: u32, d: u32) {
    // SAFETY: the launch passes a 16-byte aligned global pointer.
    unsafe { GlobalPtr::from_generic(p).st_v4([a, b, c, d]) };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_put(dst: RawSym<u32>, src: RawSlice<u32>, rank: u32) {
    // SAFETY: see the module.
    let (dst, src): (SymSliceMut<u32>, &[u32]) = unsafe { (arg(dst), arg(src)) };
    put(Group::Thread, dst.peer(rank), src);
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_put_block(dst: RawSym<u8>, src: RawSlice<u8>, rank: u32) {
    // SAFETY: see the module.
    let (dst, src): (SymSliceMut<u8>, &[u8]) = unsafe { (arg(dst), arg(src)) };
    put(Group::Block, dst.peer(rank), src);
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_get_warp(dst: RawSlice<f32>, src: RawSym<f32>, rank: u32) {
    // SAFETY: see the module.
    let (dst, src): (&mut [f32], SymSlice<f32>) = unsafe { (arg(dst), arg(src)) };
    get(Group::Warp, dst, src.peer(rank));
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_put_signal_block(dst: RawSym<u32>, src: RawSlice<u32>, pad: RawSym<u64>) {
    // SAFETY: see the module.
    let (dst, src, pad): (SymSliceMut<u32>, &[u32], SignalPad) = unsafe { (arg(dst), arg(src), arg(pad)) };
    let peer = 1 - team::rank();
    put_signal(Group::Block, dst.peer(peer), src, pad.peer(peer, 0), SignalOp::Add(1));
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_put_nbi_quiet(dst: RawSym<u32>, src: RawSlice<u32>, rank: u32) {
    // SAFETY: see the module.
    let (dst, src): (SymSliceMut<u32>, &[u32]) = unsafe { (arg(dst), arg(src)) };
    put_nbi(Group::Warp, dst.peer(rank), src).quiet();
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_ll_store(p: *mut LlPacket, data: u64, flag: u32) {
    // SAFETY: the launch passes a 16-byte aligned global pointer.
    unsafe { ll_store(p, LlPacket::new(data, flag)) };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_ll_load(p: *const LlPacket, out: *mut LlPacket) {
    // SAFETY: the launch passes 16-byte aligned global pointers.
    unsafe { *out = ll_load(p) };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_put_ll(dst: RawSym<LlPacket>, src: RawSlice<u64>, rank: u32, flag: u32) {
    // SAFETY: see the module.
    let (dst, src): (SymSliceMut<LlPacket>, &[u64]) = unsafe { (arg(dst), arg(src)) };
    put_ll(Group::Thread, dst.peer(rank), src, flag);
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_read_ll(dst: RawSlice<u64>, src: RawSym<LlPacket>, flag: u32) {
    // SAFETY: see the module.
    let (dst, src): (&mut [u64], SymSliceMut<LlPacket>) = unsafe { (arg(dst), arg(src)) };
    read_ll(Group::Thread, dst, src.local(), flag);
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_bf16_add(a: bf16, b: bf16, out: *mut bf16) {
    // SAFETY: the launch passes a valid pointer.
    unsafe { *out = a + b };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_rsqrt(v: f32, out: *mut f32) {
    // SAFETY: the launch passes a valid pointer.
    unsafe { *out = ferrocomm_device::math::rsqrt(v) };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_mma_bf16(a: *const [u32; 4], b: *const [u32; 2], c: *mut [f32; 4]) {
    // SAFETY: the launch passes valid pointers.
    unsafe { *c = ferrocomm_device::mma::mma_m16n8k16_bf16(*a, *b, *c) };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_pack_low_halves(a: u32, b: u32, out: *mut u32) {
    // SAFETY: the launch passes a valid pointer.
    unsafe { *out = ferrocomm_device::mma::pack_low_halves(a, b) };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_pack_high_halves(a: u32, b: u32, out: *mut u32) {
    // SAFETY: the launch passes a valid pointer.
    unsafe { *out = ferrocomm_device::mma::pack_high_halves(a, b) };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_fma(a: f32, b: f32, c: f32, out: *mut f32) {
    // SAFETY: the launch passes a valid pointer.
    unsafe { *out = ferrocomm_device::math::fma(a, b, c) };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_f16_add(a: f16, b: f16, out: *mut f16) {
    // SAFETY: the launch passes a valid pointer.
    unsafe { *out = a + b };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_bf16_from_f32(v: f32, out: *mut bf16) {
    // SAFETY: the launch passes a valid pointer.
    unsafe { *out = bf16::from_f32(v) };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_f16_from_f32(v: f32, out: *mut f16) {
    // SAFETY: the launch passes a valid pointer.
    unsafe { *out = f16::from_f32(v) };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_f16_to_f32(v: f16, out: *mut f32) {
    // SAFETY: the launch passes a valid pointer.
    unsafe { *out = v.to_f32() };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_exit_thread(when: u32) {
    if when != 0 {
        error::exit_thread();
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_panic(src: RawSlice<u32>, i: u32, out: *mut u32) {
    // SAFETY: see the module.
    let src: &[u32] = unsafe { arg(src) };
    // A bounds check: its failure path is the panic handler (record, then trap).
    // SAFETY: the launch passes a valid pointer.
    unsafe { *out = src[i as usize] };
}
