//! fabrik-api
