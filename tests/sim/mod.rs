//! The protocol simulator (issue "Evidence, not anecdotes"): the scripts
//! the library sends, run in Lua 5.1 ([`lua`]) over a model of Redis with a
//! virtual clock ([`store`]), and a seeded random source ([`Rng`]) so every
//! run replays from its seed.
#![allow(dead_code)]

#[cfg(test)]
mod differential;
pub mod lua;
pub mod plain;
pub mod redlock;
pub mod rwlock;
pub mod semaphore;
pub mod store;
pub mod world;

/// A seed of its own for each run (printed on failure: it replays the run).
pub fn fresh_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// How many lines of a failing run's trace to show: `SIM_TAIL`, or 25.
pub fn tail_lines() -> usize {
    std::env::var("SIM_TAIL")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(25)
}

/// A small seeded random source (splitmix64): the same seed, the same run.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// One of `items`.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}
