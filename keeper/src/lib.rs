//! The keeper: the unprivileged half of tacid (docs/design.md section 3).
//!
//! It decides who may ask for what ([`authority`]), tells people what a restore costs
//! ([`words`]), records who asked, what they were told and what happened ([`journal`]),
//! and asks the stem ([`stem_client`]). [`keeper1`] serves it on the bus; [`wire`] is what
//! crosses the bus to the CLI, which builds this crate without the `daemon` feature.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod copy_retention;
pub mod retention;
pub mod wire;
pub mod words;

#[cfg(feature = "daemon")]
pub mod authority;
#[cfg(feature = "daemon")]
pub mod caps;
#[cfg(feature = "daemon")]
pub mod journal;
#[cfg(feature = "daemon")]
pub mod keeper1;
#[cfg(feature = "daemon")]
pub mod reconcile;
#[cfg(feature = "daemon")]
pub mod refusals;
#[cfg(feature = "daemon")]
pub mod service;
#[cfg(feature = "daemon")]
pub mod stem_client;
