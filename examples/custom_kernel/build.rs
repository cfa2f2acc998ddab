// Compiles this crate for nvptx64 and writes the PTX to $OUT_DIR/ferrocomm_ptx.rs, which
// `ferrocomm::kernel_module!()` in src/lib.rs embeds.
fn main() {
    ferrocomm_builder::build_script();
}
