// Proves that a kernel's `KERNEL` static names the crate's PTX module, `crate::__FERROCOMM_MODULE`, which
// `ferrocomm::kernel_module!()` defines at the root of a kernels crate; without it the error points at the
// kernel. (`#[kernel(module = path)]` names another static.)
use ferrocomm_device::kernel;

#[kernel(no_wait)]
pub fn scale(dst: &mut [f32], by: f32) {
    dst[0] *= by;
}

#[kernel(no_wait, module = self::NOT_THERE)]
pub fn elsewhere(dst: &mut [f32]) {
    dst[0] = 0.0;
}

fn main() {}
