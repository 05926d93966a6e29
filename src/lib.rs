//! placeholder
pub mod protocol;
pub mod client;
