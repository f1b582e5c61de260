//! A `grpc.health.v1` server for the kubelet's gRPC probe tests, run inside a test pod:
//! `skiff-grpc-health-server PORT [SERVICE=STATUS]...` serves the Health service on
//! `0.0.0.0:PORT` with the server as a whole (service "") SERVING and each named service in
//! the given status (`SERVING` or `NOT_SERVING`). Exits on SIGTERM. Built from tonic-health's
//! server, the counterpart of the client the prober uses.

use tonic_health::ServingStatus;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let port: u16 = args.next().ok_or("usage: skiff-grpc-health-server PORT [SERVICE=STATUS]...")?.parse()?;
    let (reporter, service) = tonic_health::server::health_reporter();
    for arg in args {
        let (name, status) = arg.split_once('=').ok_or("SERVICE=STATUS expected")?;
        let status = match status {
            "SERVING" => ServingStatus::Serving,
            "NOT_SERVING" => ServingStatus::NotServing,
            other => return Err(format!("unknown status {other}").into()),
        };
        reporter.set_service_status(name, status).await;
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    println!("serving grpc.health.v1 on port {port}");
    tonic::transport::Server::builder()
        .add_service(service)
        .serve_with_shutdown(([0, 0, 0, 0], port).into(), async move {
            term.recv().await;
        })
        .await?;
    Ok(())
}
