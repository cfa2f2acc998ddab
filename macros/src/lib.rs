//! `#[kernel]`: one Rust function becomes a GPU kernel, its typed host launcher and its CPU-emulator body.
//!
//! Use it through `ferrocomm_device::kernel` in a kernels crate (see [`macro@kernel`]). The crate is split
//! in two: `parse` reads and validates the item (every rejection is a spanned error that names the fix),
//! `generate` writes the device entry, the host glue and the checks only the compiler can make.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

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
/// - `requires(relation, ...)`, or a relation on its own (`len(a) == len(b)`): each relation is one
///   comparison (`==`, `!=`, `<`, `<=`, `>`, `>=`) of integer expressions made of `len(buffer)` (elements of a
///   `&[T]`, `&mut [T]`, `SymSlice<T>`, `SymSliceMut<T>` argument; bytes of a byte view), `world()`, integer
///   arguments and their fields (`plan.len`), integer literals, `+ - * / %` and parentheses. The launcher
///   evaluates them on every rank, in checked `i128` arithmetic (an overflow or a division by zero fails),
///   before anything runs; a violation is `Error::Requirement` naming the kernel, the first argument the
///   relation names, the relation and the value of every term.
/// - `instances(name<Type, ...>, ...)`: a generic kernel (type parameters only) has one PTX entry per
///   instance, named `name`, with its type parameters set to the instance's types. Each instance gets
///   `mod name` (`launch`, `KERNEL`, `emulate`) as a plain kernel does, and `mod <kernel>` holds the sealed
///   trait `Instance` (implemented for each instance's type, or tuple of types), `kernel::<T>()` and the
///   generic `launch::<T>(...)`; a type no instance lists does not compile.
/// - `bytes(argument, ...)`: `u8` buffer arguments (`&[u8]`, `&mut [u8]`, `SymSlice<u8>`, `SymSliceMut<u8>`,
///   or one of them in `Option`) whose launcher parameter is a `ferrocomm::ByteView` / `ByteViewMut`
///   (`buf.bytes()`, `buf.bytes_mut()`): a buffer of any element type, as bytes.
/// - `no_wait`: the kernel never waits on other blocks or ranks. Without it the runtime refuses grids that
///   cannot all be resident on the GPU at once (a waiting block would spin on one that never starts).
/// - `module = path`: the `ferrocomm::KernelModule` static holding this kernel's PTX. Default:
///   `crate::__FERROCOMM_MODULE`, which `ferrocomm::kernel_module!()` defines at the crate root.
/// - `debug`: prints the expansion, formatted, while the crate compiles.
///
/// Optional buffers: an argument of type `Option<&[T]>`, `Option<&mut [T]>`, `Option<SymSlice<T>>` or
/// `Option<SymSliceMut<T>>` takes `Option<&SymBuffer<T>>` (or `Option<&mut ...>`); `None` travels as a null
/// address and reaches the kernel as `None`. Only buffers may be optional, and relations cannot take the
/// length of one.
///
/// # Rejected, with an error at the offending tokens
///
/// References to host data (`&String`, `&Vec<T>`, `&T` with `T` not a slice), trait objects, `Vec`,
/// `String`, `Box` and other host heap types (anywhere in a type), raw and function pointers, return
/// values, generics over lifetimes or consts, type parameters without `instances` (and instance lists that
/// do not match them), named lifetimes, `impl Trait`, `self`, `async`, `const` and `extern` functions,
/// argument patterns other than a (possibly `mut`) name, optional non-buffers, `bytes(...)` of what is not a
/// `u8` buffer, relations outside the grammar above or naming what is not an argument of the right kind.
/// On an error the item is emitted unchanged next to the `compile_error!`, so the rest of the crate still
/// type-checks. Each of these has a compile-fail case in `tests/macro-ui/ui/fail`.
#[proc_macro_attribute]
pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    generate::expand(attr.into(), item.into()).into()
}
