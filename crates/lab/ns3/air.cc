// airpack-ns3-air: ns-3's 802.11 model as the lab's air (issue 10).
//
// Owns: one ns-3 process holding one Wi-Fi node per lab node (adhoc, or one
// access point and stations), joined by YansWifiChannels (one per
// transmitter, listing the nodes that hear it) whose
// MatrixPropagationLossModel says who hears whom (a link table: listed pairs
// hear each other at `loss` dB, every other pair is 400 dB apart, so
// non-neighbours neither hear nor disturb each other: hidden terminals,
// spatial reuse), plus point-to-point cables between nodes. In tap mode
// every node's `radio0` (and every cable end `wiredK`) is a tap descriptor
// the lab opened inside the node's namespace, glued to the node's devices
// (air_io.cc). ns-3 runs on its real-time scheduler with a hard limit. In
// sim mode (no descriptors) the same air runs in pure simulation with CBR
// flows generated inside ns-3 (the cross-check of the emulation).
//
// Must not touch: anything in the namespaces (the lab configures them); it
// only reads and writes the descriptors and files it was given.
//
// Input: one config file (argv[1]), one directive per line:
//   phy b2                 preset: b1 b2 b5.5 b11 (DSSS long preamble), b11s (short),
//                          a6..a54 (OFDM)
//   queue 50               per-node MAC queue limit (packets); also each cable's queue
//   max_delay_ms 60000     MAC queue lifetime (ns-3's default 500 ms drops old packets)
//   hard_limit_ms 100      real-time hard limit (start-up needs tens of ms)
//   duration_s 0           stop after this much (simulated) time; 0 = at SIGTERM
//   realtime 1             sim mode: pace the simulation by the real-time scheduler
//                          (best effort) as tap mode does, to measure its cost and lag
//   stats PATH             per-node counters as JSON, rewritten every 200 ms
//   obs DIR MS             per-node observability files DIR/NODE.air every MS ms
//   seed 1                 ns-3 RngRun
//   mode adhoc             or `infrastructure` (then `ap I` names the access point)
//   ap I                   the access point (infrastructure mode)
//   assoc_stagger_ms T     infrastructure: the k-th station (0-based) starts to look
//                          for the AP's SSID at k x T ms (it scans for another SSID
//                          until then), so stations join one by one as in a real cell
//                          instead of all at the first beacon (their association
//                          requests, on AC_VO with CWmax 7 under `ap_edca`, then
//                          collide for tens of seconds with 60 stations)
//   mcast_mbit R           rate of group-addressed frames (0: the PHY's lowest)
//   ht_mcs K               802.11n HT (5 GHz, 20 MHz) at MCS K for data; `phy` (OFDM)
//                          then names the legacy rate of control frames
//   ampdu 1 / amsdu 0      HT: the MAC's A-MPDU (65535 B) / A-MSDU (7935 B) on or off
//   rate_control constant  or `minstrel` (Minstrel, Minstrel-HT with ht_mcs)
//   node NAME MAC FD [Q]   FD = tap descriptor (inherited), -1 = no tap (sim mode);
//                          Q = the node's MAC queue limit (default: `queue`)
//   link I J LOSS_DB       nodes I and J (0-based) hear each other (at 16.02 dBm sent:
//                          detected from -82 dBm, i.e. 98 dB; interfering down to
//                          -101 dBm, 117 dB)
//   capture MARGIN_DB WINDOW_US   every PHY gets ns-3's SimpleFrameCaptureModel: a
//                          receiver locked on a frame switches to a new one at least
//                          MARGIN_DB stronger arriving within WINDOW_US of the locked
//                          frame's start (default: no capture model); ns-3 3.37 aborts
//                          ("Invalid WifiPhy state RX") on a switch after the locked frame's
//                          PHY header, so WINDOW_US must end within it (802.11a: 16-20 µs)
//   ber I J BER            frames from node I received by node J are lost with
//                          probability 1 - (1 - BER)^bits (air_ber.cc); one direction
//   wired I J RATE_BPS DELAY_US MAC_I MAC_J FD_I FD_J   a point-to-point cable
//   flow I J PPS BYTES START_S STOP_S [unicast|bcast|wired]   sim mode: CBR of
//                          BYTES-byte IP packets (bcast: counted at J)
//   path K N0 N1 .. Nm     sim mode: flow K (0-based, in order) is relayed
//                          N0 (= I) -> N1 -> .. -> Nm (= J) hop by hop (voice mode)
//   send_jitter_us J       sim mode, voice: each packet of a flow leaves at its
//                          nominal time plus uniform [0, J) µs (breaks the exact
//                          phase lock of CBR sources; 0 = none, the default)
//   packets PATH           sim mode: write one line per sent packet of every
//                          unicast flow, `FLOW SEQ SENT_NS RECV_NS` (RECV -1 = lost),
//                          at exit (voice mode)
//   mux_ap US MAX HDR REP UDPIP D   voice mode: the access point (`ap`) multiplexes
//                          what it relays to stations (air_cell.cc: interval US, frame
//                          limit MAX, header HDR, repeat length REP, UDP/IP UDPIP bytes,
//                          redundancy depth D); path hops along a `wired` cable go over it
//   mux_entry P S0 .. Sm   entry bytes of a stream's packets (the last P repeat)
//   mux_report PATH        the multiplexer's counters (JSON) at exit
//   mux_copies N           every multiplexed frame sent N times (1-4)
//   agg_up AP HOLD_US B2 .. BK   voice mode: nodes bundle their first hops to AP
//                          (air_agg.cc: up to K packets, B_j bytes for j of them)
//   agg_up_busy            with agg_up: hold only while the node's MAC queues hold a frame
//   ap_edca AIFSN CWMIN CWMAX TXOP_US   infrastructure: every node QoS at the DCF's
//                          access, the AP's AC_VO at these values, the AP's voice on
//                          AC_VO (air_edca.cc)
// Output: a JSON report on stdout at exit (lag, events, CPU, counters).

#include "air.h"

#include <cstdio>
#include <fstream>
#include <sstream>

namespace air
{
std::vector<NodeCfg> g_nodes;
std::vector<FlowCfg> g_flows;
std::vector<WiredCfg> g_wired;
std::vector<Counters> g_cnt;
std::vector<Ptr<WifiNetDevice>> g_wifi;
std::vector<Ptr<FdNetDevice>> g_tap;
std::vector<Mac48Address> g_lab_mac, g_air_mac;
volatile sig_atomic_t g_stop = 0;
std::string g_stats;
bool g_voice = false;
std::string g_packets;
double g_send_jitter_us = 0;
uint32_t g_stations = 0, g_associated = 0;
uint64_t g_assoc_events = 0, g_last_assoc_us = 0;
} // namespace air

using namespace air;

namespace
{

void OnSignal(int)
{
    g_stop = 1;
}

void Assoc(Mac48Address)
{
    g_associated++;
    g_assoc_events++;
    g_last_assoc_us = Simulator::Now().GetMicroSeconds();
}

void DeAssoc(Mac48Address)
{
    g_associated--;
}

[[noreturn]] void Fail(const std::string& why)
{
    std::fprintf(stderr, "airpack-ns3-air: %s\n", why.c_str());
    std::exit(2);
}

std::string RateName(double mbit)
{
    std::ostringstream o;
    o << mbit;
    std::string s = o.str();
    for (auto& c : s)
    {
        c = c == '.' ? '_' : c;
    }
    return s;
}

struct Link
{
    uint32_t a, b;
    double loss;
};

struct AirConfig
{
    std::string phy = "b2", mode = "adhoc", obs_dir, rate_control = "constant";
    uint32_t queue = 50, seed = 1, ap = 0, obs_ms = 20, ampdu = 1, amsdu = 0;
    int ht_mcs = -1;
    double max_delay_ms = 60000, hard_limit_ms = 100, duration_s = 0, mcast_mbit = 0;
    double capture_db = -1, capture_us = 16; // capture_db < 0: no frame capture model
    double assoc_stagger_ms = 0; // > 0: station k looks for the AP's SSID from k x this
    uint32_t realtime = 0;
    std::vector<Link> links;
};

AirConfig Parse(const char* path)
{
    AirConfig c;
    std::ifstream in(path);
    if (!in)
    {
        Fail(std::string("cannot read ") + path);
    }
    std::string line;
    while (std::getline(in, line))
    {
        std::istringstream s(line);
        std::string k;
        if (!(s >> k) || k[0] == '#')
        {
            continue;
        }
        bool ok = true;
        if (k == "phy")
            ok = bool(s >> c.phy);
        else if (k == "queue")
            ok = bool(s >> c.queue);
        else if (k == "max_delay_ms")
            ok = bool(s >> c.max_delay_ms);
        else if (k == "hard_limit_ms")
            ok = bool(s >> c.hard_limit_ms);
        else if (k == "duration_s")
            ok = bool(s >> c.duration_s);
        else if (k == "realtime")
            ok = bool(s >> c.realtime);
        else if (k == "stats")
            ok = bool(s >> g_stats);
        else if (k == "obs")
            ok = bool(s >> c.obs_dir >> c.obs_ms);
        else if (k == "seed")
            ok = bool(s >> c.seed);
        else if (k == "mode")
            ok = bool(s >> c.mode) && (c.mode == "adhoc" || c.mode == "infrastructure");
        else if (k == "assoc_stagger_ms")
            ok = bool(s >> c.assoc_stagger_ms) && c.assoc_stagger_ms >= 0 &&
                 c.assoc_stagger_ms <= 10000;
        else if (k == "ap")
            ok = bool(s >> c.ap);
        else if (k == "mcast_mbit")
            ok = bool(s >> c.mcast_mbit);
        else if (k == "ht_mcs")
            ok = bool(s >> c.ht_mcs) && c.ht_mcs >= 0 && c.ht_mcs <= 7;
        else if (k == "ampdu")
            ok = bool(s >> c.ampdu);
        else if (k == "amsdu")
            ok = bool(s >> c.amsdu);
        else if (k == "rate_control")
            ok = bool(s >> c.rate_control) &&
                 (c.rate_control == "constant" || c.rate_control == "minstrel");
        else if (k == "node")
        {
            NodeCfg n;
            ok = bool(s >> n.name >> n.mac >> n.fd);
            if (!(s >> n.queue))
            {
                n.queue = 0;
            }
            g_nodes.push_back(n);
        }
        else if (k == "capture")
            ok = bool(s >> c.capture_db >> c.capture_us) && c.capture_db >= 0 &&
                 c.capture_us >= 0;
        else if (k == "link")
        {
            Link l;
            ok = bool(s >> l.a >> l.b >> l.loss);
            c.links.push_back(l);
        }
        else if (k == "ber")
        {
            BerCfg b;
            ok = bool(s >> b.tx >> b.rx >> b.ber) && b.ber >= 0 && b.ber < 1 && b.tx != b.rx;
            g_ber.push_back(b);
        }
        else if (k == "wired")
        {
            WiredCfg w;
            ok = bool(s >> w.a >> w.b >> w.rate_bps >> w.delay_us >> w.mac_a >> w.mac_b >> w.fd_a >>
                      w.fd_b) &&
                 w.rate_bps > 0 && w.delay_us >= 0;
            g_wired.push_back(w);
        }
        else if (k == "path")
        {
            uint32_t f, x;
            ok = bool(s >> f) && f < g_flows.size();
            if (ok)
            {
                g_flows[f].path.clear();
                while (s >> x)
                {
                    g_flows[f].path.push_back(x);
                }
                ok = g_flows[f].path.size() >= 2 && g_flows[f].path.front() == g_flows[f].from &&
                     g_flows[f].path.back() == g_flows[f].to;
            }
            g_voice = true;
        }
        else if (k == "send_jitter_us")
            ok = bool(s >> g_send_jitter_us) && g_send_jitter_us >= 0 && g_send_jitter_us < 20000;
        else if (k == "packets")
        {
            ok = bool(s >> g_packets);
            g_voice = true;
        }
        else if (k == "flow")
        {
            FlowCfg f;
            std::string kind = "unicast";
            ok = bool(s >> f.from >> f.to >> f.pps >> f.bytes >> f.start >> f.stop) && f.pps > 0;
            s >> kind;
            f.kind = kind == "bcast" ? FlowKind::Bcast
                                     : (kind == "wired" ? FlowKind::Wired : FlowKind::Unicast);
            ok = ok && (kind == "unicast" || kind == "bcast" || kind == "wired");
            g_flows.push_back(f);
        }
        else if (k.rfind("mux_", 0) == 0)
            ok = MuxDirective(k, s);
        else if (k == "agg_up" || k == "agg_up_busy")
            ok = AggDirective(k, s);
        else if (k == "ap_edca" || k == "sta_be_edca")
            ok = EdcaDirective(k, s);
        else
            ok = false;
        if (!ok)
        {
            Fail("bad config line: " + line);
        }
    }
    const uint32_t n = g_nodes.size();
    if (n < 2)
    {
        Fail("need at least 2 nodes");
    }
    for (auto& l : c.links)
    {
        if (l.a >= n || l.b >= n)
            Fail("link to an unknown node");
    }
    for (auto& b : g_ber)
    {
        if (b.tx >= n || b.rx >= n)
            Fail("ber of a link to an unknown node");
    }
    for (auto& w : g_wired)
    {
        if (w.a >= n || w.b >= n || w.a == w.b)
            Fail("wired link between unknown nodes");
    }
    for (auto& f : g_flows)
    {
        if (f.from >= n || f.to >= n)
            Fail("flow of an unknown node");
        for (auto x : f.path)
        {
            if (x >= n)
                Fail("path through an unknown node");
        }
        if (g_voice)
        {
            if (f.kind != FlowKind::Unicast || f.bytes < 8)
                Fail("voice mode needs unicast flows of at least 8 bytes");
            if (f.path.empty())
                f.path = {f.from, f.to};
        }
    }
    if (c.ap >= n)
    {
        Fail("unknown access point");
    }
    if (EdcaOn() && c.mode != "infrastructure")
    {
        Fail("ap_edca needs infrastructure mode");
    }
    if (!MuxCheck(c.ap))
    {
        Fail("mux_ap needs mux_entry and voice mode");
    }
    if (!AggCheck(n))
    {
        Fail("agg_up needs voice mode and a known access point");
    }
    return c;
}

} // namespace

int main(int argc, char** argv)
{
    if (argc != 2)
    {
        Fail("usage: airpack-ns3-air CONFIG");
    }
    AirConfig cfg = Parse(argv[1]);
    const uint32_t n = g_nodes.size();
    bool tap = false;
    for (auto& nd : g_nodes)
    {
        tap = tap || nd.fd >= 0;
    }
    for (auto& w : g_wired)
    {
        tap = tap || w.fd_a >= 0 || w.fd_b >= 0;
    }
    if (!tap && cfg.duration_s <= 0)
    {
        Fail("sim mode needs duration_s");
    }

    // PHY preset -> standard and mode (constant rate, data and control)
    const std::string& phy = cfg.phy;
    WifiStandard std;
    std::string mode, control, mcast;
    bool ofdm = phy.size() > 1 && (phy[0] == 'a' || phy[0] == 'g');
    const bool ht = cfg.ht_mcs >= 0;
    const bool short_preamble = phy == "b11s";
    if (phy == "b1" || phy == "b2" || phy == "b5.5" || phy == "b11" || short_preamble)
    {
        std = WIFI_STANDARD_80211b;
        mode = "DsssRate" + RateName(std::stod(phy.substr(1, phy.size() - 1 - short_preamble))) +
               "Mbps";
    }
    else if (ofdm)
    {
        std = ht ? WIFI_STANDARD_80211n : WIFI_STANDARD_80211a;
        mode = "OfdmRate" + phy.substr(1) + "Mbps";
    }
    else
    {
        Fail("unknown or unsupported phy preset " + phy);
    }
    if (ht && !ofdm)
    {
        Fail("ht_mcs needs an OFDM phy preset");
    }
    control = mode;
    if (ht)
    {
        mode = "HtMcs" + std::to_string(cfg.ht_mcs);
    }
    if (cfg.mcast_mbit > 0)
    {
        mcast = (ofdm ? "OfdmRate" : "DsssRate") + RateName(cfg.mcast_mbit) + "Mbps";
    }

    RngSeedManager::SetRun(cfg.seed);
    const bool realtime = tap || cfg.realtime;
    if (realtime)
    {
        GlobalValue::Bind("SimulatorImplementationType", StringValue("ns3::RealtimeSimulatorImpl"));
        Config::SetDefault("ns3::RealtimeSimulatorImpl::SynchronizationMode",
                           StringValue(tap ? "HardLimit" : "BestEffort"));
        Config::SetDefault("ns3::RealtimeSimulatorImpl::HardLimit",
                           TimeValue(MilliSeconds(cfg.hard_limit_ms)));
    }
    Config::SetDefault("ns3::WifiMacQueue::MaxSize",
                       QueueSizeValue(QueueSize(std::to_string(cfg.queue) + "p")));
    Config::SetDefault("ns3::WifiMacQueue::MaxDelay", TimeValue(MilliSeconds(cfg.max_delay_ms)));

    NodeContainer nodes;
    nodes.Create(n);
    MobilityHelper mob;
    Ptr<ListPositionAllocator> pos = CreateObject<ListPositionAllocator>();
    for (uint32_t i = 0; i < n; i++)
    {
        pos->Add(Vector(i, 0, 0));
    }
    mob.SetPositionAllocator(pos);
    mob.SetMobilityModel("ns3::ConstantPositionMobilityModel");
    mob.Install(nodes);

    Ptr<MatrixPropagationLossModel> loss = CreateObject<MatrixPropagationLossModel>();
    loss->SetDefaultLoss(400);
    std::vector<bool> linked(n, false);
    for (auto& l : cfg.links)
    {
        loss->SetLoss(nodes.Get(l.a)->GetObject<MobilityModel>(),
                      nodes.Get(l.b)->GetObject<MobilityModel>(),
                      l.loss);
        linked[l.a] = linked[l.b] = true;
    }
    // One YansWifiChannel per transmitting node, holding its own PHY and its
    // link-table neighbours' (in node order, as one shared channel would
    // list them): a frame is handed only to nodes that can hear it. With
    // one shared channel every other node got a reception event per frame,
    // which YansWifiChannel::Receive drops at once below the receiver's
    // sensitivity (400 dB: no signal, no interference, no random draw), so
    // leaving those events out changes no result, only the cost of sparse
    // topologies (docs/lab.md, 2b).
    Ptr<ConstantSpeedPropagationDelayModel> delay =
        CreateObject<ConstantSpeedPropagationDelayModel>();
    std::vector<Ptr<YansWifiChannel>> channels(n);
    std::vector<std::vector<bool>> hears(n, std::vector<bool>(n, false));
    for (auto& l : cfg.links)
    {
        hears[l.a][l.b] = hears[l.b][l.a] = true;
    }
    for (auto& ch : channels)
    {
        ch = CreateObject<YansWifiChannel>();
        ch->SetPropagationLossModel(loss);
        ch->SetPropagationDelayModel(delay);
    }

    YansWifiPhyHelper phyHelper;
    if (ht)
    {
        phyHelper.Set("ChannelSettings", StringValue("{36, 20, BAND_5GHZ, 0}"));
    }
    if (cfg.capture_db >= 0)
    {
        phyHelper.SetFrameCaptureModel("ns3::SimpleFrameCaptureModel",
                                       "Margin",
                                       DoubleValue(cfg.capture_db),
                                       "CaptureWindow",
                                       TimeValue(MicroSeconds(cfg.capture_us)));
    }
    WifiHelper wifi;
    wifi.SetStandard(std);
    if (cfg.rate_control == "minstrel")
    {
        wifi.SetRemoteStationManager(ht ? "ns3::MinstrelHtWifiManager" : "ns3::MinstrelWifiManager");
    }
    else
    {
        wifi.SetRemoteStationManager("ns3::ConstantRateWifiManager",
                                     "DataMode",
                                     StringValue(mode),
                                     "ControlMode",
                                     StringValue(control));
    }
    if (!mcast.empty())
    {
        Config::SetDefault("ns3::WifiRemoteStationManager::NonUnicastMode", StringValue(mcast));
    }
    // infrastructure: the AP and every node with a radio link that is not
    // the AP (a station); nodes without radio links stay adhoc (deaf)
    const bool infra = cfg.mode == "infrastructure";
    Ssid ssid("airpack-lab");
    NetDeviceContainer devs;
    std::vector<uint32_t> stations;
    for (uint32_t i = 0; i < n; i++)
    {
        uint32_t q = g_nodes[i].queue ? g_nodes[i].queue : cfg.queue;
        Config::SetDefault("ns3::WifiMacQueue::MaxSize",
                           QueueSizeValue(QueueSize(std::to_string(q) + "p")));
        if (ht)
        {
            Config::SetDefault("ns3::WifiMac::BE_MaxAmpduSize",
                               UintegerValue(cfg.ampdu ? 65535 : 0));
            Config::SetDefault("ns3::WifiMac::BE_MaxAmsduSize",
                               UintegerValue(cfg.amsdu ? 7935 : 0));
        }
        WifiMacHelper mac;
        if (infra && i == cfg.ap)
        {
            mac.SetType("ns3::ApWifiMac", "Ssid", SsidValue(ssid), "QosSupported",
                        BooleanValue(EdcaOn()));
        }
        else if (infra && linked[i])
        {
            // the lab's stations stay associated through any congestion
            mac.SetType("ns3::StaWifiMac",
                        "Ssid",
                        SsidValue(ssid),
                        "MaxMissedBeacons",
                        UintegerValue(1000000),
                        "QosSupported",
                        BooleanValue(EdcaOn()));
            g_stations++;
            stations.push_back(i);
        }
        else
        {
            mac.SetType("ns3::AdhocWifiMac");
        }
        phyHelper.SetChannel(channels[i]); // node i transmits on its own channel
        devs.Add(wifi.Install(phyHelper, mac, nodes.Get(i)));
    }
    for (uint32_t i = 0; i < n; i++)
    {
        for (uint32_t j = 0; j < n; j++)
        {
            if (hears[i][j])
            {
                Ptr<YansWifiPhy> rx = DynamicCast<YansWifiPhy>(
                    DynamicCast<WifiNetDevice>(devs.Get(j))->GetPhy());
                channels[i]->Add(rx);
            }
        }
    }

    g_cnt.resize(n);
    g_tap.resize(n);
    for (uint32_t i = 0; i < n; i++)
    {
        Ptr<WifiNetDevice> w = DynamicCast<WifiNetDevice>(devs.Get(i));
        g_wifi.push_back(w);
        g_lab_mac.push_back(Mac48Address(g_nodes[i].mac.c_str()));
        g_air_mac.push_back(Mac48Address::ConvertFrom(w->GetAddress()));
        if (short_preamble)
        {
            // 802.11b short PLCP preamble (96 µs) for every frame but the
            // 1 Mbit/s ones (which always use the long preamble)
            w->GetRemoteStationManager()->SetShortPreambleEnabled(true);
        }
    }
    EdcaConfigure(cfg.ap, stations);
    if (cfg.assoc_stagger_ms > 0)
    {
        for (size_t k = 1; k < stations.size(); k++)
        {
            Ptr<WifiMac> m = g_wifi[stations[k]]->GetMac();
            m->SetSsid(Ssid("airpack-lab-later"));
            Simulator::Schedule(MilliSeconds(cfg.assoc_stagger_ms * k), &WifiMac::SetSsid, m, ssid);
        }
    }
    for (uint32_t i = 0; i < n; i++)
    {
        ConnectNode(i);
        AttachTap(nodes.Get(i), i);
        if (infra && i != cfg.ap && linked[i])
        {
            g_wifi[i]->GetMac()->TraceConnectWithoutContext("Assoc", MakeCallback(&Assoc));
            g_wifi[i]->GetMac()->TraceConnectWithoutContext("DeAssoc", MakeCallback(&DeAssoc));
        }
    }
    SetupBer(tap);
    SetupWired(nodes, cfg.queue);
    StartFlows();

    std::signal(SIGTERM, OnSignal);
    std::signal(SIGINT, OnSignal);
    StartProbe(realtime, cfg.obs_dir, cfg.obs_ms);
    if (cfg.duration_s > 0)
    {
        Simulator::Stop(Seconds(cfg.duration_s));
    }
    double cpu0 = CpuSeconds(), wall0 = WallSeconds();
    Simulator::Run();
    double cpu = CpuSeconds() - cpu0, wall = WallSeconds() - wall0;
    double sim = Simulator::Now().GetSeconds();
    uint64_t events = Simulator::GetEventCount();
    if (!g_stats.empty())
    {
        WriteStats();
    }
    FlushFiles();
    WritePackets();
    WriteMuxReport();
    std::printf("%s\n", Report(phy, tap, sim, wall, cpu, events).c_str());
    std::fflush(stdout);
    Simulator::Destroy();
    return 0;
}
