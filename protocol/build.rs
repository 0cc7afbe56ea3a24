//! Compiles the `.proto` files with protox (pure Rust), so no system protoc is needed.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["perfetto_subset.proto", "relay.proto"], ["proto"])?;
    prost_build::Config::new().bytes(["."]).compile_fds(fds)?;
    Ok(())
}
