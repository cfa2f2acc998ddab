//! `ferrocomm-device`: the language communication kernels are written in.
#![cfg_attr(target_arch = "nvptx64", no_std)]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx, asm_experimental_arch))]

pub mod abi;

#[cfg(target_arch = "nvptx64")]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // SAFETY: `trap` ends the kernel; nothing after it runs.
    unsafe { core::arch::asm!("trap;", options(noreturn)) }
}
