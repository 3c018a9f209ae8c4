//! fabrik-api: the management models shared by `fabrikd` and fabrik's tools: the configuration
//! file schema today, the REST resources next.

pub mod config;
pub mod metrics;
