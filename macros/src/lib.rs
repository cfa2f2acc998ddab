//! `#[kernel]`: one Rust function becomes a GPU kernel, its typed host launcher and its CPU-emulator body.
//!
//! Use it through `ferrocomm_device::kernel` in a kernels crate (see [`macro@kernel`]). The crate is split
//! in two: `parse` reads and validates the item (every rejection is a spanned error that names the fix),
//! `generate` writes the device entry, the host glue and the checks only the compiler can make.
#![forbid(unsafe_code)]

mod generate;
mod parse;

use proc_macro::TokenStream;

/// Turns a function into a ferrocomm kernel: a PTX entry on the GPU, a typed launcher and an emulator body
/// on the host, from one source.
///
/// ```ignore
/// use ferrocomm_device::{kernel, SymSlice};
///
/// /// Adds `src` (on every rank) into `dst`.
/// #[kernel(len(dst) == len(src))]
/// pub fn accumulate(dst: &mut [f32], src: SymSlice<f32>, scale: f32) {
///     // ... device code ...
/// }
///
/// // On the host (the kernels crate invokes `ferrocomm::kernel_module!()` at its root):
/// let guard = accumulate::launch(&team, cfg, &mut dst, &src, 0.5)?;
/// guard.wait()?;
/// ```
///
/// # What it generates
///
/// For `#[kernel] pub fn name(a: A, b: B) { body }`:
///
/// - on `nvptx64`: `#[unsafe(no_mangle)] pub unsafe extern "ptx-kernel" fn name(a: <A as DeviceParam>::Abi,
///   b: ...)`, the PTX entry `name`, which converts each argument with `DeviceParam::from_abi` and runs the
///   body (kept in a private `#[inline(always)]` function). Slices arrive as `RawSlice` (pointer, length),
///   symmetric buffers as `RawSym`, scalars as themselves.
/// - on the host:
///   - `pub fn name(a: A, b: B) { body }` unchanged: the body the CPU emulator runs;
///   - `pub mod name` (functions and modules live in different namespaces) holding
///     - `pub fn launch<'a>(team: &'a Team, cfg: LaunchConfig, a: <A as LaunchParam>::Host<'a>, ...)
///       -> Result<LaunchGuard<'a>, Error>`: its parameters mirror the kernel's, so their count and types
///       match by construction. `&[T]` and `SymSlice<T>` take `&'a SymBuffer<T>`, `&mut [T]` and
///       `SymSliceMut<T>` take `&'a mut SymBuffer<T>`, scalars themselves: a buffer stays borrowed for as
///       long as the guard lives, so touching, re-borrowing or freeing it on the host before the kernel is
///       done does not compile;
///     - `pub static KERNEL: ferrocomm::Kernel`, the runtime's description of the kernel;
///     - `pub unsafe fn emulate(params: &[*const c_void])`, the emulator's entry, taking the arguments as
///       `cuLaunchKernel` does (one pointer per ABI value).
/// - everywhere: a check that every by-value argument is `Copy` (each GPU thread gets a bitwise copy).
///
/// Paths in argument types resolve from inside `mod name` through `use super::*;` (`self::` and `super::`
/// prefixes are rewritten to match), so the types a kernel names are the types its launcher names.
///
/// # Options
///
/// - `len(a) == len(b)` (also `<=`, `>=`; several may be given): checked by the launcher on every rank
///   before anything runs; a violation is `Error::LengthMismatch` naming the relation and both lengths.
///   `len` applies to `&[T]`, `&mut [T]`, `SymSlice<T>` and `SymSliceMut<T>` arguments.
/// - `no_wait`: the kernel never waits on other blocks or ranks. Without it the runtime refuses grids that
///   cannot all be resident on the GPU at once (a waiting block would spin on one that never starts).
/// - `module = path`: the `ferrocomm::KernelModule` static holding this kernel's PTX. Default:
///   `crate::__FERROCOMM_MODULE`, which `ferrocomm::kernel_module!()` defines at the crate root.
/// - `debug`: prints the expansion, formatted, while the crate compiles.
///
/// # Rejected, with an error at the offending tokens
///
/// References to host data (`&String`, `&Vec<T>`, `&T` with `T` not a slice), trait objects, `Vec`,
/// `String`, `Box` and other host heap types (anywhere in a type), raw and function pointers, return
/// values, generics and named lifetimes, `impl Trait`, `self`, `async`, `const` and `extern` functions,
/// argument patterns other than a (possibly `mut`) name. On an error the item is emitted unchanged next to
/// the `compile_error!`, so the rest of the crate still type-checks.
#[proc_macro_attribute]
pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    generate::expand(attr.into(), item.into()).into()
}
