fn main() {
    ferrocomm_builder::build_script()
}
