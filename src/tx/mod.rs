//! Transmit burst paths, one module per backend.

pub mod dv;
pub mod verbs;
pub mod xdp;
