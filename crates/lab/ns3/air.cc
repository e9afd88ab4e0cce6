// airpack-ns3-air: ns-3's 802.11 model as the lab's air (issue 10).
//
// Owns: one ns-3 process holding one adhoc Wi-Fi node per lab node, joined by
// a YansWifiChannel whose MatrixPropagationLossModel says who hears whom (a
// link table: listed pairs hear each other at `loss` dB, every other pair is
// 400 dB apart, so non-neighbours neither hear nor disturb each other: hidden
// terminals, spatial reuse). In tap mode every node also has an FdNetDevice on
// the tap descriptor the lab opened inside the node's namespace (`radio0`);
// frames read from the tap are sent by the node's WifiNetDevice, frames the
// WifiNetDevice receives for it (or broadcast/multicast) are written to the
// tap. ns-3 runs on its real-time scheduler with a hard limit. In sim mode
// (no descriptors) the same air runs in pure simulation with CBR flows
// generated inside ns-3 (the cross-check of the emulation).
//
// Must not touch: anything in the namespaces (the lab configures them); it
// only reads and writes the descriptors it was given.
//
// Input: one config file (argv[1]), one directive per line:
//   phy b2                 preset: b1 b2 b5.5 b11 (DSSS long preamble), a6..a54 (OFDM)
//   queue 50               per-node MAC queue limit (packets)
//   max_delay_ms 60000     MAC queue lifetime (ns-3's default 500 ms drops old packets)
//   hard_limit_ms 100      real-time hard limit (start-up needs tens of ms)
//   duration_s 0           stop after this much (simulated) time; 0 = at SIGTERM
//   stats PATH             tap mode: per-node counters as JSON, rewritten every 200 ms
//   seed 1                 ns-3 RngRun
//   node NAME MAC FD       FD = tap descriptor (inherited), -1 = no tap (sim mode)
//   link I J LOSS_DB       nodes I and J (0-based) hear each other
//   flow I J PPS BYTES START_S STOP_S   sim mode: CBR of BYTES-byte IP packets
// Output: a JSON report on stdout at exit (lag, events, CPU, counters).

#include "ns3/core-module.h"
#include "ns3/fd-net-device-module.h"
#include "ns3/mobility-module.h"
#include "ns3/network-module.h"
#include "ns3/propagation-module.h"
#include "ns3/realtime-simulator-impl.h"
#include "ns3/wifi-module.h"

#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <sys/resource.h>
#include <time.h>

using namespace ns3;

namespace
{

struct NodeCfg
{
    std::string name;
    std::string mac;
    int fd = -1;
};

struct FlowCfg
{
    uint32_t from, to;
    double pps;
    uint32_t bytes;
    double start, stop;
    uint64_t sent = 0, received = 0;
    double first = -1, last = -1;
};

struct Counters
{
    uint64_t from_tap = 0;  // frames the node's kernel sent on radio0
    uint64_t mac_tx = 0;    // MSDUs handed to the Wi-Fi MAC
    uint64_t mac_rx = 0;    // MSDUs the Wi-Fi MAC delivered (any destination heard)
    uint64_t to_tap = 0;    // frames written to radio0
    uint64_t phy_tx = 0;    // PPDUs transmitted (data, ACK, retries)
    uint64_t enqueued = 0;  // MSDUs the MAC queue accepted
    uint64_t drop_queue = 0, drop_retry = 0, drop_expired = 0, drop_other = 0;
};

std::vector<NodeCfg> g_nodes;
std::vector<FlowCfg> g_flows;
std::vector<Counters> g_cnt;
std::vector<Ptr<WifiNetDevice>> g_wifi;
std::vector<Ptr<FdNetDevice>> g_tap;
// A node's Wi-Fi device keeps the address ns-3 gave it (changing it after
// installation leaves the MAC's frame exchange on the old one, so no ACKs);
// frames are translated between the lab's radio MACs and these addresses.
std::vector<Mac48Address> g_lab_mac, g_air_mac;
volatile sig_atomic_t g_stop = 0;
std::string g_stats;

// real-time lag histogram: 10 µs bins up to 1 s
const int LAG_BIN_US = 10;
std::vector<uint64_t> g_lag(100001, 0);
double g_lag_max_us = 0;
uint64_t g_lag_n = 0;

void OnSignal(int)
{
    g_stop = 1;
}

double CpuSeconds()
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

double WallSeconds()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

std::string CountersJson(uint32_t i)
{
    Counters& c = g_cnt[i];
    c.drop_queue = c.mac_tx - std::min(c.mac_tx, c.enqueued);
    std::ostringstream o;
    o << "{\"name\":\"" << g_nodes[i].name << "\",\"from_tap\":" << c.from_tap
      << ",\"mac_tx\":" << c.mac_tx << ",\"mac_rx\":" << c.mac_rx << ",\"to_tap\":" << c.to_tap
      << ",\"phy_tx\":" << c.phy_tx << ",\"drop_queue\":" << c.drop_queue
      << ",\"drop_retry\":" << c.drop_retry << ",\"drop_expired\":" << c.drop_expired
      << ",\"drop_other\":" << c.drop_other << "}";
    return o.str();
}

void WriteStats()
{
    std::string tmp = g_stats + ".tmp";
    {
        std::ofstream f(tmp);
        f << "{\"sim_s\":" << Simulator::Now().GetSeconds() << ",\"nodes\":[";
        for (uint32_t i = 0; i < g_nodes.size(); i++)
        {
            f << (i ? "," : "") << CountersJson(i);
        }
        f << "]}\n";
    }
    std::rename(tmp.c_str(), g_stats.c_str());
}

// Every millisecond: sample how far the real-time scheduler runs behind
// the wall clock, stop on SIGTERM, and now and then rewrite the stats file.
void LagProbe(Ptr<RealtimeSimulatorImpl> rt, uint64_t tick)
{
    double lag_us = (rt->RealtimeNow() - Simulator::Now()).GetMicroSeconds();
    if (lag_us < 0)
    {
        lag_us = 0;
    }
    g_lag_max_us = std::max(g_lag_max_us, lag_us);
    g_lag[std::min<size_t>(size_t(lag_us / LAG_BIN_US), g_lag.size() - 1)]++;
    g_lag_n++;
    if (!g_stats.empty() && tick % 200 == 0)
    {
        WriteStats();
    }
    if (g_stop)
    {
        Simulator::Stop();
        return;
    }
    Simulator::Schedule(MilliSeconds(1), &LagProbe, rt, tick + 1);
}

double LagQuantileUs(double q)
{
    if (g_lag_n == 0)
    {
        return 0;
    }
    uint64_t want = uint64_t(q * g_lag_n), acc = 0;
    for (size_t b = 0; b < g_lag.size(); b++)
    {
        acc += g_lag[b];
        if (acc > want)
        {
            return double((b + 1) * LAG_BIN_US);
        }
    }
    return g_lag_max_us;
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
    g_wifi[i]->Send(p->Copy(), dst, proto);
    return true;
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
    uint32_t sender = g_air_mac.size();
    for (uint32_t j = 0; j < g_air_mac.size(); j++)
    {
        if (g_air_mac[j] == src)
        {
            sender = j;
        }
    }
    if (sender == g_air_mac.size())
    {
        return true; // not one of ours
    }
    if (g_tap[i])
    {
        g_cnt[i].to_tap++;
        g_tap[i]->SendFrom(p->Copy(), g_lab_mac[sender], dst == g_air_mac[i] ? g_lab_mac[i] : dst, proto);
        return true;
    }
    for (auto& f : g_flows)
    {
        if (f.to == i && f.from == sender)
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
    return true;
}

void FlowSend(uint32_t k)
{
    FlowCfg& f = g_flows[k];
    f.sent++;
    g_wifi[f.from]->Send(Create<Packet>(f.bytes), g_wifi[f.to]->GetAddress(), 0x0800);
    if (Simulator::Now().GetSeconds() + 1.0 / f.pps < f.stop)
    {
        Simulator::Schedule(Seconds(1.0 / f.pps), &FlowSend, k);
    }
}

void MacTx(uint32_t i, Ptr<const Packet>)
{
    g_cnt[i].mac_tx++;
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
    switch (r)
    {
    case WIFI_MAC_DROP_FAILED_ENQUEUE: // counted by QueueFull
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

// ns-3 3.37's WifiMacQueue refuses an MPDU when full without firing
// DropBeforeEnqueue, so full-queue drops are MSDUs handed to the MAC that
// never entered its queue.
void Enqueued(uint32_t i, Ptr<const WifiMpdu>)
{
    g_cnt[i].enqueued++;
}

[[noreturn]] void Fail(const std::string& why)
{
    std::fprintf(stderr, "airpack-ns3-air: %s\n", why.c_str());
    std::exit(2);
}

} // namespace

int main(int argc, char** argv)
{
    if (argc != 2)
    {
        Fail("usage: airpack-ns3-air CONFIG");
    }
    std::string phy = "b2";
    uint32_t queue = 50, seed = 1;
    double max_delay_ms = 60000, hard_limit_ms = 100, duration_s = 0;
    struct Link
    {
        uint32_t a, b;
        double loss;
    };
    std::vector<Link> links;
    std::ifstream in(argv[1]);
    if (!in)
    {
        Fail(std::string("cannot read ") + argv[1]);
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
            ok = bool(s >> phy);
        else if (k == "queue")
            ok = bool(s >> queue);
        else if (k == "max_delay_ms")
            ok = bool(s >> max_delay_ms);
        else if (k == "hard_limit_ms")
            ok = bool(s >> hard_limit_ms);
        else if (k == "duration_s")
            ok = bool(s >> duration_s);
        else if (k == "stats")
            ok = bool(s >> g_stats);
        else if (k == "seed")
            ok = bool(s >> seed);
        else if (k == "node")
        {
            NodeCfg n;
            ok = bool(s >> n.name >> n.mac >> n.fd);
            g_nodes.push_back(n);
        }
        else if (k == "link")
        {
            Link l;
            ok = bool(s >> l.a >> l.b >> l.loss);
            links.push_back(l);
        }
        else if (k == "flow")
        {
            FlowCfg f;
            ok = bool(s >> f.from >> f.to >> f.pps >> f.bytes >> f.start >> f.stop) && f.pps > 0;
            g_flows.push_back(f);
        }
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
    bool tap = false;
    for (auto& nd : g_nodes)
    {
        tap = tap || nd.fd >= 0;
    }
    for (auto& l : links)
    {
        if (l.a >= n || l.b >= n)
            Fail("link to an unknown node");
    }
    for (auto& f : g_flows)
    {
        if (f.from >= n || f.to >= n)
            Fail("flow of an unknown node");
    }
    if (!tap && duration_s <= 0)
    {
        Fail("sim mode needs duration_s");
    }

    // PHY preset -> standard and mode (constant rate, data and control)
    WifiStandard std;
    std::string mode;
    if (phy == "b1" || phy == "b2")
    {
        std = WIFI_STANDARD_80211b;
        mode = phy == "b1" ? "DsssRate1Mbps" : "DsssRate2Mbps";
    }
    else if (phy == "b5.5" || phy == "b11")
    {
        std = WIFI_STANDARD_80211b;
        mode = phy == "b11" ? "DsssRate11Mbps" : "DsssRate5_5Mbps";
    }
    else if (phy.size() > 1 && (phy[0] == 'a' || phy[0] == 'g'))
    {
        std = WIFI_STANDARD_80211a;
        mode = "OfdmRate" + phy.substr(1) + "Mbps";
    }
    else
    {
        Fail("unknown or unsupported phy preset " + phy);
    }

    RngSeedManager::SetRun(seed);
    if (tap)
    {
        GlobalValue::Bind("SimulatorImplementationType", StringValue("ns3::RealtimeSimulatorImpl"));
        Config::SetDefault("ns3::RealtimeSimulatorImpl::SynchronizationMode",
                           StringValue("HardLimit"));
        Config::SetDefault("ns3::RealtimeSimulatorImpl::HardLimit",
                           TimeValue(MilliSeconds(hard_limit_ms)));
    }
    Config::SetDefault("ns3::WifiMacQueue::MaxSize",
                       QueueSizeValue(QueueSize(std::to_string(queue) + "p")));
    Config::SetDefault("ns3::WifiMacQueue::MaxDelay", TimeValue(MilliSeconds(max_delay_ms)));

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
    for (auto& l : links)
    {
        loss->SetLoss(nodes.Get(l.a)->GetObject<MobilityModel>(),
                      nodes.Get(l.b)->GetObject<MobilityModel>(),
                      l.loss);
    }
    Ptr<YansWifiChannel> channel = CreateObject<YansWifiChannel>();
    channel->SetPropagationLossModel(loss);
    channel->SetPropagationDelayModel(CreateObject<ConstantSpeedPropagationDelayModel>());

    YansWifiPhyHelper phyHelper;
    phyHelper.SetChannel(channel);
    WifiMacHelper mac;
    mac.SetType("ns3::AdhocWifiMac");
    WifiHelper wifi;
    wifi.SetStandard(std);
    wifi.SetRemoteStationManager("ns3::ConstantRateWifiManager",
                                 "DataMode",
                                 StringValue(mode),
                                 "ControlMode",
                                 StringValue(mode));
    NetDeviceContainer devs = wifi.Install(phyHelper, mac, nodes);

    g_cnt.resize(n);
    g_tap.resize(n);
    for (uint32_t i = 0; i < n; i++)
    {
        Ptr<WifiNetDevice> w = DynamicCast<WifiNetDevice>(devs.Get(i));
        g_wifi.push_back(w);
        g_lab_mac.push_back(Mac48Address(g_nodes[i].mac.c_str()));
        g_air_mac.push_back(Mac48Address::ConvertFrom(w->GetAddress()));
        w->SetPromiscReceiveCallback(MakeBoundCallback(&FromAir, i));
        w->GetMac()->TraceConnectWithoutContext("MacTx", MakeBoundCallback(&MacTx, i));
        w->GetMac()->TraceConnectWithoutContext("MacRx", MakeBoundCallback(&MacRx, i));
        w->GetMac()->TraceConnectWithoutContext("DroppedMpdu", MakeBoundCallback(&Dropped, i));
        w->GetMac()->GetTxop()->GetWifiMacQueue()->TraceConnectWithoutContext(
            "Enqueue",
            MakeBoundCallback(&Enqueued, i));
        w->GetPhy()->TraceConnectWithoutContext("PhyTxBegin", MakeBoundCallback(&PhyTx, i));
        if (g_nodes[i].fd >= 0)
        {
            Ptr<FdNetDevice> t = CreateObject<FdNetDevice>();
            // the tap's own address is never used as a source or filter
            t->SetAddress(Mac48Address::Allocate());
            nodes.Get(i)->AddDevice(t);
            t->SetFileDescriptor(g_nodes[i].fd);
            t->SetPromiscReceiveCallback(MakeBoundCallback(&FromTap, i));
            g_tap[i] = t;
        }
    }
    for (uint32_t k = 0; k < g_flows.size(); k++)
    {
        Simulator::Schedule(Seconds(g_flows[k].start), &FlowSend, k);
    }

    std::signal(SIGTERM, OnSignal);
    std::signal(SIGINT, OnSignal);
    if (tap)
    {
        Ptr<RealtimeSimulatorImpl> rt =
            DynamicCast<RealtimeSimulatorImpl>(Simulator::GetImplementation());
        if (!rt)
        {
            Fail("real-time scheduler not active");
        }
        Simulator::Schedule(Seconds(0), &LagProbe, rt, uint64_t(0));
    }
    if (duration_s > 0)
    {
        Simulator::Stop(Seconds(duration_s));
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

    std::ostringstream o;
    o << "{\"mode\":\"" << (tap ? "tap" : "sim") << "\",\"phy\":\"" << phy
      << "\",\"sim_s\":" << sim << ",\"wall_s\":" << wall << ",\"cpu_s\":" << cpu
      << ",\"cpu_pct\":" << (wall > 0 ? 100 * cpu / wall : 0) << ",\"events\":" << events
      << ",\"events_per_s\":" << (wall > 0 ? events / wall : 0)
      << ",\"lag_samples\":" << g_lag_n << ",\"lag_max_ms\":" << g_lag_max_us / 1000
      << ",\"lag_p99_ms\":" << LagQuantileUs(0.99) / 1000
      << ",\"lag_p50_ms\":" << LagQuantileUs(0.5) / 1000 << ",\"nodes\":[";
    for (uint32_t i = 0; i < n; i++)
    {
        o << (i ? "," : "") << CountersJson(i);
    }
    o << "],\"flows\":[";
    for (uint32_t k = 0; k < g_flows.size(); k++)
    {
        const FlowCfg& f = g_flows[k];
        double fps = (f.received > 1 && f.last > f.first) ? (f.received - 1) / (f.last - f.first) : 0;
        o << (k ? "," : "") << "{\"from\":" << f.from << ",\"to\":" << f.to << ",\"sent\":" << f.sent
          << ",\"received\":" << f.received << ",\"fps\":" << fps << "}";
    }
    o << "]}";
    std::printf("%s\n", o.str().c_str());
    std::fflush(stdout);
    Simulator::Destroy();
    return 0;
}
