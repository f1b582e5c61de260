//! The real server on 127.0.0.1: cluster names over UDP and TCP, NXDOMAIN, forwarding of other
//! names to an upstream, and random bytes at the packet entry point.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, Record, RecordType, rdata::A};
use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use parking_lot::RwLock;
use proptest::prelude::*;
use skiff_dns::{DnsServer, RecordIndex, Reply, handle_packet};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

fn index() -> RecordIndex {
    let mut idx = RecordIndex::new("cluster.local").unwrap();
    idx.upsert_service(&Service {
        metadata: ObjectMeta { name: Some("web".into()), namespace: Some("default".into()), ..Default::default() },
        spec: Some(ServiceSpec { cluster_ip: Some("10.43.0.20".into()), ..Default::default() }),
        ..Default::default()
    });
    idx
}

fn query(id: u16, name: &str, qtype: RecordType) -> Vec<u8> {
    let mut msg = Message::new();
    msg.set_id(id).set_message_type(MessageType::Query).set_recursion_desired(true);
    msg.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    msg.to_vec().unwrap()
}

async fn udp_ask(server: SocketAddr, packet: &[u8]) -> Message {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.send_to(packet, server).await.unwrap();
    let mut buf = vec![0u8; 65535];
    let (n, _) =
        tokio::time::timeout(Duration::from_secs(10), socket.recv_from(&mut buf)).await.expect("an answer").unwrap();
    Message::from_vec(&buf[..n]).unwrap()
}

async fn start(upstreams: Vec<SocketAddr>) -> SocketAddr {
    let server =
        DnsServer::bind("127.0.0.1:0".parse().unwrap(), Arc::new(RwLock::new(index())), upstreams).await.unwrap();
    let addr = server.local_addr().unwrap();
    tokio::spawn(server.run());
    addr
}

#[tokio::test]
async fn a_service_name_resolves_over_udp_and_tcp() {
    let addr = start(Vec::new()).await;
    let answer = udp_ask(addr, &query(7, "web.default.svc.cluster.local.", RecordType::A)).await;
    assert_eq!(answer.id(), 7);
    assert_eq!(answer.response_code(), ResponseCode::NoError);
    assert_eq!(answer.answers()[0].data(), &RData::A(A::new(10, 43, 0, 20)));

    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let packet = query(8, "web.default.svc.cluster.local.", RecordType::A);
    tcp.write_all(&(packet.len() as u16).to_be_bytes()).await.unwrap();
    tcp.write_all(&packet).await.unwrap();
    let mut len = [0u8; 2];
    tcp.read_exact(&mut len).await.unwrap();
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
    tcp.read_exact(&mut buf).await.unwrap();
    let answer = Message::from_vec(&buf).unwrap();
    assert_eq!(answer.id(), 8);
    assert_eq!(answer.answers()[0].data(), &RData::A(A::new(10, 43, 0, 20)));
}

#[tokio::test]
async fn an_unknown_cluster_name_is_nxdomain_with_the_soa() {
    let addr = start(Vec::new()).await;
    let answer = udp_ask(addr, &query(9, "nope.default.svc.cluster.local.", RecordType::A)).await;
    assert_eq!(answer.response_code(), ResponseCode::NXDomain);
    assert!(answer.answers().is_empty());
    assert_eq!(answer.name_servers()[0].record_type(), RecordType::SOA);
}

#[tokio::test]
async fn a_malformed_packet_is_dropped_and_the_server_keeps_answering() {
    let addr = start(Vec::new()).await;
    let garbage = [0xde, 0xad, 0xbe];
    assert_eq!(handle_packet(&index(), &garbage, 512), Reply::Drop);
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.send_to(&garbage, addr).await.unwrap();
    let answer = udp_ask(addr, &query(10, "web.default.svc.cluster.local.", RecordType::A)).await;
    assert_eq!(answer.id(), 10);
}

#[tokio::test]
async fn other_names_are_forwarded_to_the_upstream_resolver() {
    // A fake upstream that answers every query with 192.0.2.1.
    let upstream = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let upstream_addr = upstream.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65535];
        loop {
            let (n, peer) = upstream.recv_from(&mut buf).await.unwrap();
            let request = Message::from_vec(&buf[..n]).unwrap();
            let mut response = Message::new();
            response.set_id(request.id()).set_message_type(MessageType::Response);
            let q = request.queries()[0].clone();
            response.add_answer(Record::from_rdata(q.name().clone(), 60, RData::A(A::new(192, 0, 2, 1))));
            response.add_query(q);
            upstream.send_to(&response.to_vec().unwrap(), peer).await.unwrap();
        }
    });
    let addr = start(vec![upstream_addr]).await;
    let answer = udp_ask(addr, &query(11, "example.com.", RecordType::A)).await;
    assert_eq!(answer.id(), 11);
    assert_eq!(answer.answers()[0].data(), &RData::A(A::new(192, 0, 2, 1)));
}

#[test]
fn a_response_is_not_answered() {
    let mut packet = query(12, "web.default.svc.cluster.local.", RecordType::A);
    packet[2] |= 0x80;
    assert_eq!(handle_packet(&index(), &packet, 512), Reply::Drop);
}

proptest! {
    #[test]
    fn random_bytes_never_panic_the_packet_entry_point(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = handle_packet(&index(), &bytes, 512);
    }

    #[test]
    fn a_mutated_query_never_panics_the_packet_entry_point(flips in proptest::collection::vec((0usize..64, any::<u8>()), 1..8)) {
        let mut packet = query(13, "_http._tcp.web.default.svc.cluster.local.", RecordType::SRV);
        for (at, byte) in flips {
            let at = at % packet.len();
            packet[at] = byte;
        }
        let _ = handle_packet(&index(), &packet, 512);
    }
}
