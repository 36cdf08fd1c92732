//! Compiles `proto/event_log.proto` with the `protoc` that `protoc-bin-vendored` ships, so that
//! building this example needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure()
        .build_transport(false)
        .compile_with_config(config, &["proto/event_log.proto"], &["proto"])?;
    Ok(())
}
