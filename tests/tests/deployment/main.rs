//! Deployment as operators meet it: the image, compose, Kubernetes, the example files, the
//! README's steps, the first day, least privilege and upgrades. One test binary, a module
//! per file:
//!
//! - `chart`: the Helm chart, rendered by Helm's library for every mode and size, validated, and
//!   held to a rollout and a drain that can always proceed.
//! - `chart_on_podman`: the chart's pods run by `podman kube play`, handing a lease over when the
//!   holder's pod stops.
//! - `compose`: the compose example up and down with podman-compose.
//! - `containers`: real podman containers of the project's image.
//! - `deploy_files`: the example config, the systemd unit and the Dockerfile stay true to the
//!   host.
//! - `first_day`: an operator's first day: each mistake answered with an error naming the fix.
//! - `kubernetes`: the Kubernetes example, validated offline and held to its comments.
//! - `kubernetes_leader_only`: the active/passive example, validated, its sidecar config run.
//! - `least_privilege`: the documented least-privilege setup of `examples/postgres/`.
//! - `readme_steps`: the README's "Write a plugin" steps and its `toml` blocks, run as written.
//! - `suite`: the test suite's own promises: no test binary without tests, its table, its counts.
//! - `upgrades`: this release beside the previous one, and a newer protocol refused.
//! - `version`: `leasehold --version` names the release and the commit.

mod chart;
mod chart_on_podman;
mod compose;
mod containers;
mod deploy_files;
mod first_day;
mod kubernetes;
mod kubernetes_leader_only;
mod least_privilege;
mod readme_steps;
mod suite;
mod upgrades;
mod version;
