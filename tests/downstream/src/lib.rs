//! The README's examples, compiled as this crate's doc tests: against
//! `leasehold` alone, as a downstream crate uses it.
#![doc = include_str!("../../../README.md")]
