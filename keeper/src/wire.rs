//! What crosses the bus between the CLI and the keeper: the `keeper_interface` crate's, under
//! the name the keeper's code has always used for its errors.

pub use keeper_interface::*;

/// The keeper's named errors (`org.tacid.Keeper1.Error.<Kind>`).
pub type KeeperError = keeper_interface::Error;
