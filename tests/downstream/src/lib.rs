//! The examples of the README and of `docs/*.md`, compiled as this crate's
//! doc tests: against `leasehold` alone, as a downstream crate uses it. The
//! README is the crate's documentation; each file of `docs/` is a module's.
#![doc = include_str!("../../../README.md")]

/// `docs/design.md`: why leasehold works as it does.
#[doc = include_str!("../../../docs/design.md")]
pub mod design {}

/// `docs/wire.md`: what leasehold keeps in Redis.
#[doc = include_str!("../../../docs/wire.md")]
pub mod wire {}

/// `docs/performance.md`: the benchmarks and what they mean.
#[doc = include_str!("../../../docs/performance.md")]
pub mod performance {}

/// `docs/contributing.md`: working on leasehold.
#[doc = include_str!("../../../docs/contributing.md")]
pub mod contributing {}
