//! The `signature` module's own API, without the layer: the known answers of the header format,
//! and properties over arbitrary secrets, bodies and timestamps. The layer's answers to each
//! kind of bad signature are in `tests/layer/verify_signature.rs`.

mod known_answers;
mod properties;
