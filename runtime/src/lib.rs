//! What a Punctual service runs on, beside the domain of `punctual-shared`: the Kafka
//! clients and topics, the bounded HTTP server and the operations endpoints (`/healthz`,
//! `/readyz`, `/metrics`), problem+json errors, logs and trace export, the supervisor of a
//! service's long-lived tasks, and the metrics every service exposes.

pub mod http_server;
pub mod kafka;
pub mod metric_registrar;
pub mod ops;
pub mod otlp;
pub mod periodic;
pub mod problem;
pub mod producer;
pub mod readiness;
pub mod service_metrics;
pub mod supervisor;
pub mod telemetry;
