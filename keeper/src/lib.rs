//! The keeper: the unprivileged half of tacid (docs/design.md section 3).
//!
//! It decides who may ask for what ([`authority`]), tells people what a restore costs
//! ([`words`]), records who asked, what they were told and what happened ([`journal`]),
//! and asks the stem ([`stem_client`]). Its acts are small services that own their state
//! ([`consent`], [`refusals`], [`reconcile`], [`copies`], [`opens`], [`list`],
//! [`retention`]), handed only the [`handles`] meant to be shared and composed by
//! [`service`]; [`keeper1`] serves it on the bus; [`wire`] is what crosses the bus to the
//! CLI (the `keeper_interface` crate, which the CLI builds on).

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod authority;
pub mod caps;
pub mod consent;
pub mod copier_client;
pub mod copies;
pub mod handles;
pub mod health;
pub mod journal;
pub mod keeper1;
pub mod list;
pub mod opens;
pub mod reconcile;
pub mod refusals;
pub mod retention;
pub mod service;
pub mod space;
pub mod stem_client;
pub mod wire;
pub mod words;
