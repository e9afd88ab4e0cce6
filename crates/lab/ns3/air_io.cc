// airpack-ns3-air: what crosses the boundary of the simulation. Frames from
// a node's tap `radio0` are sent by its WifiNetDevice, frames its Wi-Fi MAC
// delivers are written back to the tap; wired links glue two taps `wiredK`
// to the two ends of a PointToPointNetDevice pair. In pure simulation (no
// taps) CBR flows generated here take the taps' place. Also the trace sinks
// that keep the per-node counters (air.h) up to date.
//
// Must not touch: the scenario (air.cc builds it) or files (air_obs.cc).

#include "air.h"

namespace air
{

namespace
{

// The MSDU being handed to a Wi-Fi MAC (its packet uid) and whether one of
// the node's MAC queues accepted it: ns-3 3.37's WifiMacQueue refuses an
// MPDU when full without a trace, and StaWifiMac drops MSDUs silently while
// unassociated, so a refusal is "not enqueued during Send".
uint64_t g_pending_uid = UINT64_MAX;
bool g_pending_ok = false;

void SendWifi(uint32_t i, Ptr<Packet> p, Mac48Address dst, uint16_t proto)
{
    g_cnt[i].mac_tx++;
    g_pending_uid = p->GetUid();
    g_pending_ok = false;
    g_wifi[i]->Send(p, dst, proto);
    if (!g_pending_ok)
    {
        g_cnt[i].drop_queue++;
    }
    g_pending_uid = UINT64_MAX;
}

void Enqueued(Ptr<const WifiMpdu> mpdu)
{
    if (mpdu->GetPacket()->GetUid() == g_pending_uid)
    {
        g_pending_ok = true;
    }
}

Mac48Address LabOf(Mac48Address air)
{
    uint32_t j = NodeOfAirMac(air);
    return j < g_lab_mac.size() ? g_lab_mac[j] : air;
}

// tap -> air
bool FromTap(uint32_t i,
             Ptr<NetDevice>,
             Ptr<const Packet> p,
             uint16_t proto,
             const Address&,
             const Address& to,
             NetDevice::PacketType)
{
    g_cnt[i].from_tap++;
    Mac48Address dst = Mac48Address::ConvertFrom(to);
    for (uint32_t j = 0; j < g_lab_mac.size(); j++)
    {
        if (g_lab_mac[j] == dst)
        {
            dst = g_air_mac[j];
            break;
        }
    }
    Ptr<Packet> c = p->Copy();
    EdcaTagDscp(i, c, proto); // `ap_edca`: the AP's packets by their DSCP
    SendWifi(i, c, dst, proto);
    return true;
}

void FlowReceived(FlowKind kind, uint32_t from, uint32_t to)
{
    for (auto& f : g_flows)
    {
        if (f.kind == kind && f.to == to && f.from == from)
        {
            double now = Simulator::Now().GetSeconds();
            f.received++;
            if (f.first < 0)
            {
                f.first = now;
            }
            f.last = now;
        }
    }
}

// Voice mode: a hop along a cable (the cell's wired side) goes over it,
// not the air; false if i and j share no cable.
bool SendWired(uint32_t i, uint32_t j, Ptr<const Packet> p, uint16_t proto)
{
    for (auto& w : g_wired)
    {
        if ((w.a == i && w.b == j) || (w.b == i && w.a == j))
        {
            auto dev = w.a == i ? w.dev_a : w.dev_b;
            if (!dev->Send(p->Copy(), dev->GetBroadcast(), proto))
            {
                w.drop[w.a == i ? 0 : 1]++;
            }
            return true;
        }
    }
    return false;
}

// Voice mode: node i received flow packet p (or a bundle of them,
// air_agg.cc); relay it to the path's next node (a cable, the AP's
// multiplexer (air_cell.cc) or the air), or record it at the flow's end.
void VoiceReceived(uint32_t i, Ptr<const Packet> p, uint16_t proto)
{
    uint8_t h[8];
    if (p->GetSize() < 8 || p->CopyData(h, 8) != 8)
    {
        return;
    }
    uint32_t k = GetU32(h), seq = GetU32(h + 4);
    if (k == AGG_MARK)
    {
        std::vector<std::pair<uint32_t, uint32_t>> parts;
        if (AggSplit(p, parts))
        {
            for (auto& [pk, ps] : parts)
            {
                VoiceReceived(i, VoicePacket(pk, ps), proto);
            }
            return;
        }
    }
    if (k >= g_flows.size())
    {
        return;
    }
    FlowCfg& f = g_flows[k];
    if (i == f.to)
    {
        if (seq < f.recv_ns.size() && f.recv_ns[seq] < 0)
        {
            f.recv_ns[seq] = Simulator::Now().GetNanoSeconds();
            f.received++;
            double now = Simulator::Now().GetSeconds();
            f.first = f.first < 0 ? now : f.first;
            f.last = now;
        }
        return;
    }
    for (size_t h2 = 0; h2 + 1 < f.path.size(); h2++)
    {
        if (f.path[h2] == i)
        {
            uint32_t next = f.path[h2 + 1];
            if (SendWired(i, next, p, proto) || MuxTake(i, k, seq, next))
            {
                return;
            }
            Ptr<Packet> c = p->Copy();
            EdcaTag(i, c);
            SendWifi(i, c, g_air_mac[next], proto);
            return;
        }
    }
}

// air -> tap (or flow accounting in sim mode)
bool FromAir(uint32_t i,
             Ptr<NetDevice>,
             Ptr<const Packet> p,
             uint16_t proto,
             const Address& from,
             const Address& to,
             NetDevice::PacketType type)
{
    if (type == NetDevice::PACKET_OTHERHOST)
    {
        return true;
    }
    Mac48Address src = Mac48Address::ConvertFrom(from), dst = Mac48Address::ConvertFrom(to);
    uint32_t sender = NodeOfAirMac(src);
    if (sender == g_air_mac.size())
    {
        return true; // not one of ours
    }
    if (g_tap[i])
    {
        g_cnt[i].to_tap++;
        g_tap[i]->SendFrom(p->Copy(),
                           g_lab_mac[sender],
                           dst == g_air_mac[i] ? g_lab_mac[i] : dst,
                           proto);
        return true;
    }
    if (g_voice)
    {
        if (!dst.IsGroup())
        {
            VoiceReceived(i, p, proto);
        }
        else
        {
            MuxFrameReceived(i, p);
        }
        return true;
    }
    FlowReceived(dst.IsGroup() ? FlowKind::Bcast : FlowKind::Unicast, sender, i);
    return true;
}

// What node i's Wi-Fi MAC hands up (frames addressed to the node, group
// frames), delivered as WifiNetDevice::ForwardUp would, but without putting
// the MAC in promiscuous mode (ConnectNode says why).
void MacUp(uint32_t i, Ptr<const Packet> p, Mac48Address from, Mac48Address to)
{
    NetDevice::PacketType type = to.IsBroadcast() ? NetDevice::PACKET_BROADCAST
                                 : to.IsGroup()   ? NetDevice::PACKET_MULTICAST
                                 : to == g_air_mac[i] ? NetDevice::PACKET_HOST
                                                      : NetDevice::PACKET_OTHERHOST;
    if (type != NetDevice::PACKET_OTHERHOST)
    {
        g_wifi[i]->GetMac()->NotifyRx(p); // the MacRx trace (mac_rx)
    }
    Ptr<Packet> c = p->Copy();
    LlcSnapHeader llc;
    c->RemoveHeader(llc);
    FromAir(i, g_wifi[i], c, llc.GetType(), from, to, type);
}

void MacRx(uint32_t i, Ptr<const Packet>)
{
    g_cnt[i].mac_rx++;
}

void PhyTx(uint32_t i, Ptr<const Packet>, double)
{
    g_cnt[i].phy_tx++;
}

void Dropped(uint32_t i, WifiMacDropReason r, Ptr<const WifiMpdu>)
{
    AggTxDone(i);
    switch (r)
    {
    case WIFI_MAC_DROP_FAILED_ENQUEUE: // counted in SendWifi
        break;
    case WIFI_MAC_DROP_REACHED_RETRY_LIMIT:
        g_cnt[i].drop_retry++;
        break;
    case WIFI_MAC_DROP_EXPIRED_LIFETIME:
        g_cnt[i].drop_expired++;
        break;
    default:
        g_cnt[i].drop_other++;
    }
}

void PhyState(uint32_t i, Time, Time d, WifiPhyState s)
{
    switch (s)
    {
    case WifiPhyState::TX:
        g_cnt[i].tx_ns += d.GetNanoSeconds();
        break;
    case WifiPhyState::RX:
        g_cnt[i].rx_ns += d.GetNanoSeconds();
        break;
    case WifiPhyState::CCA_BUSY:
        g_cnt[i].cca_ns += d.GetNanoSeconds();
        break;
    default:
        break;
    }
}

// Per-peer signal of every MPDU received without error (also inside
// A-MPDUs), taken where the PHY hands the PSDU to the MAC: the node's
// receive-ok callback is this function, which forwards to the frame
// exchange manager exactly as the callback ns-3 installs would
// (FrameExchangeManager::Receive). Cheaper than the MonitorSnifferRx trace,
// which serialises a copy of every frame (header and FCS) for its sinks;
// the signal is the same (RxSignalInfo::rssi = the sniffer's signal).
std::vector<Ptr<FrameExchangeManager>> g_fem;

void RxOk(uint32_t i,
          Ptr<const WifiPsdu> psdu,
          RxSignalInfo info,
          WifiTxVector txv,
          std::vector<bool> ok)
{
    size_t k = 0;
    for (auto& mpdu : *PeekPointer(psdu))
    {
        const WifiMacHeader& h = mpdu->GetHeader();
        if (k < ok.size() && ok[k++] && (h.IsData() || h.IsMgt()))
        {
            // ACKs, RTS/CTS carry no transmitter we can name
            uint32_t j = NodeOfAirMac(h.GetAddr2());
            if (j != g_air_mac.size() && j != i)
            {
                Peer& peer = g_cnt[i].peers[j];
                peer.signal_avg_dbm =
                    peer.rx_frames == 0 ? info.rssi
                                        : peer.signal_avg_dbm + (info.rssi - peer.signal_avg_dbm) / 8;
                peer.signal_dbm = info.rssi;
                peer.rx_frames++;
            }
        }
    }
    g_fem[i]->Receive(psdu, info, txv, std::move(ok));
}

void Acked(uint32_t i, Ptr<const WifiMpdu> m)
{
    AggTxDone(i);
    uint32_t j = NodeOfAirMac(m->GetHeader().GetAddr1());
    if (j < g_air_mac.size())
    {
        g_cnt[i].peers[j].tx_acked++;
    }
}

void DataFailed(uint32_t i, Mac48Address a)
{
    uint32_t j = NodeOfAirMac(a);
    g_cnt[i].retries++; // corrected by FinalFailed
    if (j < g_air_mac.size())
    {
        g_cnt[i].peers[j].tx_retries++;
    }
}

void FinalFailed(uint32_t i, Mac48Address a)
{
    uint32_t j = NodeOfAirMac(a);
    g_cnt[i].retries--; // the last failed attempt was not retried
    if (j < g_air_mac.size())
    {
        g_cnt[i].peers[j].tx_retries--;
        g_cnt[i].peers[j].tx_failed++;
    }
}

// `send_jitter_us`: created only when set (after the Wi-Fi devices), so
// without it every other random stream is as before.
Ptr<UniformRandomVariable> g_jitter;

void FlowEmit(uint32_t k);

// A flow's nominal send time: the packet leaves now or after its jitter.
void FlowSend(uint32_t k)
{
    FlowCfg& f = g_flows[k];
    if (g_voice && g_jitter)
    {
        Simulator::Schedule(MicroSeconds(g_jitter->GetValue(0, g_send_jitter_us)), &FlowEmit, k);
    }
    else
    {
        FlowEmit(k);
    }
    if (Simulator::Now().GetSeconds() + 1.0 / f.pps < f.stop)
    {
        Simulator::Schedule(Seconds(1.0 / f.pps), &FlowSend, k);
    }
}

void FlowEmit(uint32_t k)
{
    FlowCfg& f = g_flows[k];
    f.sent++;
    if (g_voice)
    {
        uint32_t seq = f.sent_ns.size();
        f.sent_ns.push_back(Simulator::Now().GetNanoSeconds());
        f.recv_ns.push_back(-1);
        Ptr<Packet> p = VoicePacket(k, seq);
        if (!SendWired(f.from, f.path[1], p, 0x0800) && !AggTake(f.from, k, seq, f.path[1]))
        {
            SendWifi(f.from, p, g_air_mac[f.path[1]], 0x0800);
        }
    }
    else if (f.kind == FlowKind::Wired)
    {
        for (auto& w : g_wired)
        {
            if ((w.a == f.from && w.b == f.to) || (w.b == f.from && w.a == f.to))
            {
                auto dev = w.a == f.from ? w.dev_a : w.dev_b;
                dev->Send(Create<Packet>(f.bytes), dev->GetBroadcast(), 0x0800);
            }
        }
    }
    else
    {
        Mac48Address dst = f.kind == FlowKind::Bcast ? Mac48Address::GetBroadcast()
                                                     : g_air_mac[f.to];
        SendWifi(f.from, Create<Packet>(f.bytes), dst, 0x0800);
    }
}

// wired tap -> cable (side 0: a, 1: b)
bool FromWiredTap(uint32_t k,
                  uint32_t side,
                  Ptr<NetDevice>,
                  Ptr<const Packet> p,
                  uint16_t proto,
                  const Address&,
                  const Address&,
                  NetDevice::PacketType)
{
    WiredCfg& w = g_wired[k];
    w.from_tap[side]++;
    if (proto != 0x0800 && proto != 0x86DD)
    {
        w.dropped_proto++; // PPP carries IP only (no ARP: the lab sets neighbours)
        return true;
    }
    auto dev = side == 0 ? w.dev_a : w.dev_b;
    if (!dev->Send(p->Copy(), dev->GetBroadcast(), proto))
    {
        w.drop[side]++;
    }
    return true;
}

// cable -> wired tap of the receiving side
bool FromCable(uint32_t k, uint32_t side, Ptr<NetDevice>, Ptr<const Packet> p, uint16_t proto, const Address&)
{
    WiredCfg& w = g_wired[k];
    auto tap = side == 0 ? w.tap_a : w.tap_b;
    if (!tap && g_voice)
    {
        VoiceReceived(side == 0 ? w.a : w.b, p, proto);
        return true;
    }
    if (!tap)
    {
        FlowReceived(FlowKind::Wired, side == 0 ? w.b : w.a, side == 0 ? w.a : w.b);
        return true;
    }
    w.to_tap[side]++;
    Mac48Address self(side == 0 ? w.mac_a.c_str() : w.mac_b.c_str());
    Mac48Address peer(side == 0 ? w.mac_b.c_str() : w.mac_a.c_str());
    tap->SendFrom(p->Copy(), peer, self, proto);
    return true;
}

Ptr<FdNetDevice> OpenTap(Ptr<Node> node, int fd)
{
    Ptr<FdNetDevice> t = CreateObject<FdNetDevice>();
    // the tap's own address is never used as a source or filter
    t->SetAddress(Mac48Address::Allocate());
    node->AddDevice(t);
    t->SetFileDescriptor(fd);
    return t;
}

} // namespace

Ptr<Packet> VoicePacket(uint32_t k, uint32_t seq)
{
    std::vector<uint8_t> b(g_flows[k].bytes, 0);
    PutU32(&b[0], k);
    PutU32(&b[4], seq);
    return Create<Packet>(b.data(), b.size());
}

void SendWifiFrom(uint32_t i, Ptr<Packet> p, Mac48Address dst, uint16_t proto)
{
    SendWifi(i, p, dst, proto);
}

uint32_t NodeOfAirMac(Mac48Address a)
{
    for (uint32_t j = 0; j < g_air_mac.size(); j++)
    {
        if (g_air_mac[j] == a)
        {
            return j;
        }
    }
    return g_air_mac.size();
}

std::vector<Ptr<WifiMacQueue>> Queues(uint32_t i)
{
    Ptr<WifiMac> mac = g_wifi[i]->GetMac();
    std::vector<Ptr<WifiMacQueue>> q;
    if (mac->GetTxop())
    {
        q.push_back(mac->GetTxop()->GetWifiMacQueue());
    }
    if (mac->GetQosSupported())
    {
        for (AcIndex ac : {AC_BE, AC_BK, AC_VI, AC_VO})
        {
            q.push_back(mac->GetQosTxop(ac)->GetWifiMacQueue());
        }
    }
    return q;
}

void ConnectNode(uint32_t i)
{
    Ptr<WifiNetDevice> w = g_wifi[i];
    Ptr<WifiMac> mac = w->GetMac();
    // Not WifiNetDevice::SetPromiscReceiveCallback: it puts the MAC in
    // promiscuous mode, and ns-3 3.37's MacRxMiddle then records the
    // sequence control of every overheard unicast data frame as the
    // transmitter's last one. QoS stations (HT) number frames per receiver
    // and TID, so a relay's counters toward its two neighbours run in step,
    // and a retransmission to us that carries the number of a frame we
    // overheard going to the other neighbour is taken for a duplicate: ACKed,
    // never delivered, no drop trace (silent loss on HT multi-hop chains; a
    // real receiver's duplicate cache holds frames addressed to it only).
    mac->SetForwardUpCallback(MakeBoundCallback(&MacUp, i));
    mac->TraceConnectWithoutContext("MacRx", MakeBoundCallback(&MacRx, i));
    mac->TraceConnectWithoutContext("DroppedMpdu", MakeBoundCallback(&Dropped, i));
    mac->TraceConnectWithoutContext("AckedMpdu", MakeBoundCallback(&Acked, i));
    for (auto& q : Queues(i))
    {
        q->TraceConnectWithoutContext("Enqueue", MakeCallback(&Enqueued));
    }
    Ptr<WifiRemoteStationManager> rsm = w->GetRemoteStationManager();
    rsm->TraceConnectWithoutContext("MacTxDataFailed", MakeBoundCallback(&DataFailed, i));
    rsm->TraceConnectWithoutContext("MacTxFinalDataFailed", MakeBoundCallback(&FinalFailed, i));
    Ptr<WifiPhy> phy = w->GetPhy();
    phy->TraceConnectWithoutContext("PhyTxBegin", MakeBoundCallback(&PhyTx, i));
    if (g_fem.size() <= i)
    {
        g_fem.resize(i + 1);
    }
    g_fem[i] = mac->GetFrameExchangeManager();
    phy->SetReceiveOkCallback(MakeBoundCallback(&RxOk, i));
    phy->GetState()->TraceConnectWithoutContext("State", MakeBoundCallback(&PhyState, i));
}

void AttachTap(Ptr<Node> node, uint32_t i)
{
    if (g_nodes[i].fd >= 0)
    {
        g_tap[i] = OpenTap(node, g_nodes[i].fd);
        g_tap[i]->SetPromiscReceiveCallback(MakeBoundCallback(&FromTap, i));
    }
}

void SetupWired(NodeContainer& nodes, uint32_t queue)
{
    for (uint32_t k = 0; k < g_wired.size(); k++)
    {
        WiredCfg& w = g_wired[k];
        PointToPointHelper p2p;
        p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(uint64_t(w.rate_bps))));
        p2p.SetChannelAttribute("Delay", TimeValue(MicroSeconds(int64_t(w.delay_us))));
        p2p.SetQueue("ns3::DropTailQueue<Packet>",
                     "MaxSize",
                     QueueSizeValue(QueueSize(std::to_string(queue) + "p")));
        NetDeviceContainer d = p2p.Install(nodes.Get(w.a), nodes.Get(w.b));
        w.dev_a = DynamicCast<PointToPointNetDevice>(d.Get(0));
        w.dev_b = DynamicCast<PointToPointNetDevice>(d.Get(1));
        w.dev_a->SetReceiveCallback(MakeBoundCallback(&FromCable, k, uint32_t(0)));
        w.dev_b->SetReceiveCallback(MakeBoundCallback(&FromCable, k, uint32_t(1)));
        if (w.fd_a >= 0)
        {
            w.tap_a = OpenTap(nodes.Get(w.a), w.fd_a);
            w.tap_a->SetPromiscReceiveCallback(MakeBoundCallback(&FromWiredTap, k, uint32_t(0)));
        }
        if (w.fd_b >= 0)
        {
            w.tap_b = OpenTap(nodes.Get(w.b), w.fd_b);
            w.tap_b->SetPromiscReceiveCallback(MakeBoundCallback(&FromWiredTap, k, uint32_t(1)));
        }
    }
}

void WritePackets()
{
    if (g_packets.empty())
    {
        return;
    }
    FILE* out = std::fopen(g_packets.c_str(), "w");
    if (!out)
    {
        std::fprintf(stderr, "airpack-ns3-air: cannot write %s\n", g_packets.c_str());
        std::exit(2);
    }
    for (uint32_t k = 0; k < g_flows.size(); k++)
    {
        const FlowCfg& f = g_flows[k];
        for (size_t q = 0; q < f.sent_ns.size(); q++)
        {
            std::fprintf(out,
                         "%u %zu %lld %lld\n",
                         k,
                         q,
                         (long long)f.sent_ns[q],
                         (long long)f.recv_ns[q]);
        }
    }
    std::fclose(out);
}

void StartFlows()
{
    if (g_voice && g_send_jitter_us > 0)
    {
        g_jitter = CreateObject<UniformRandomVariable>();
    }
    for (uint32_t k = 0; k < g_flows.size(); k++)
    {
        Simulator::Schedule(Seconds(g_flows[k].start), &FlowSend, k);
    }
}

} // namespace air
