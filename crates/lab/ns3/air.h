// airpack-ns3-air: declarations shared by air.cc (config, scenario, main),
// air_io.cc (taps, wired links, flows, counters) and air_obs.cc (real-time
// lag, stats and per-node observability files, final report).
//
// Must not touch: anything in the namespaces (the lab configures them); the
// program only reads and writes the descriptors it was given and the files
// it was told to write.

#pragma once

#include "ns3/core-module.h"
#include "ns3/fd-net-device-module.h"
#include "ns3/mobility-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/propagation-module.h"
#include "ns3/realtime-simulator-impl.h"
#include "ns3/wifi-module.h"

#include <csignal>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace air
{

using namespace ns3;

struct NodeCfg
{
    std::string name;
    std::string mac;
    int fd = -1;
    uint32_t queue = 0; // per-node MAC queue limit (0 = the global one)
};

enum class FlowKind
{
    Unicast, // Wi-Fi unicast to node `to`
    Bcast,   // Wi-Fi broadcast, receptions counted at node `to`
    Wired,   // over the wired link between `from` and `to`
};

struct FlowCfg
{
    uint32_t from, to;
    double pps;
    uint32_t bytes;
    double start, stop;
    FlowKind kind = FlowKind::Unicast;
    uint64_t sent = 0, received = 0;
    double first = -1, last = -1;
    // voice mode (`path`/`packets` directives): the nodes the flow's packets
    // are relayed through (from .. to), and per packet its send and first
    // receive time at `to` (ns; -1 = not received)
    std::vector<uint32_t> path;
    std::vector<int64_t> sent_ns, recv_ns;
};

// The program's 32-bit fields in its own packets (flow index, sequence
// number, frame magic and index, bundle count), big-endian.
inline void PutU32(uint8_t* b, uint32_t v)
{
    for (int x = 0; x < 4; x++)
    {
        b[x] = uint8_t(v >> (24 - 8 * x));
    }
}

inline uint32_t GetU32(const uint8_t* b)
{
    return uint32_t(b[0]) << 24 | uint32_t(b[1]) << 16 | uint32_t(b[2]) << 8 | b[3];
}

// Voice mode: every flow packet carries its flow index and sequence number
// in its first 8 bytes and is relayed hop by hop along the flow's path.
extern bool g_voice;
extern std::string g_packets; // where to write the per-packet records
// Voice mode: each packet leaves up to this much (uniform, µs) after its
// nominal time start + k / pps (0: exactly on time; `send_jitter_us`).
extern double g_send_jitter_us;
// infrastructure: associations so far (re-associations included), the time (µs) of the last
extern uint64_t g_assoc_events, g_last_assoc_us;

// One point-to-point cable between nodes a and b (taps `wiredK`).
struct WiredCfg
{
    uint32_t a, b;
    double rate_bps, delay_us;
    std::string mac_a, mac_b;
    int fd_a = -1, fd_b = -1;
    Ptr<PointToPointNetDevice> dev_a, dev_b;
    Ptr<FdNetDevice> tap_a, tap_b;
    uint64_t from_tap[2] = {0, 0}, to_tap[2] = {0, 0}, drop[2] = {0, 0}, dropped_proto = 0;
};

// What one node knows about one other node (nl80211 station info).
struct Peer
{
    uint64_t rx_frames = 0;    // MPDUs received from it (data and management)
    double signal_dbm = 0;     // signal of the last frame received from it
    double signal_avg_dbm = 0; // exponential average (1/8) of the signal
    uint64_t tx_acked = 0;     // unicast MPDUs to it that were acknowledged
    uint64_t tx_retries = 0;   // failed attempts that were retried
    uint64_t tx_failed = 0;    // MPDUs dropped after the last attempt
    uint64_t ber_checked = 0;  // frames from it the link's bit error rate was drawn for
    uint64_t ber_lost = 0;     // of those, lost to it (air_ber.cc)
};

// A link's bit error rate, one direction: frames transmitted by `tx` and
// received by `rx` (air_ber.cc).
struct BerCfg
{
    uint32_t tx, rx;
    double ber;
};

struct Counters
{
    uint64_t from_tap = 0;  // frames the node's kernel sent on radio0
    uint64_t mac_tx = 0;    // MSDUs handed to the Wi-Fi MAC
    uint64_t mac_rx = 0;    // MSDUs the Wi-Fi MAC delivered (any destination heard)
    uint64_t to_tap = 0;    // frames written to radio0
    uint64_t phy_tx = 0;    // PPDUs transmitted (data, ACK, retries, beacons)
    uint64_t drop_queue = 0; // MSDUs the MAC refused (queue full, or not associated)
    uint64_t drop_retry = 0, drop_expired = 0, drop_other = 0;
    uint64_t retries = 0; // failed attempts that were retried (all peers)
    uint64_t ber_lost = 0; // frames received but lost to a link's bit error rate (all peers)
    // PHY state time (ns), closed periods only (ns-3's State trace)
    int64_t tx_ns = 0, rx_ns = 0, cca_ns = 0;
    std::map<uint32_t, Peer> peers; // by node index
};

extern std::vector<NodeCfg> g_nodes;
extern std::vector<FlowCfg> g_flows;
extern std::vector<WiredCfg> g_wired;
extern std::vector<Counters> g_cnt;
extern std::vector<Ptr<WifiNetDevice>> g_wifi;
extern std::vector<Ptr<FdNetDevice>> g_tap;
// A node's Wi-Fi device keeps the address ns-3 gave it (changing it after
// installation leaves the MAC's frame exchange on the old one, so no ACKs);
// frames are translated between the lab's radio MACs and these addresses.
extern std::vector<Mac48Address> g_lab_mac, g_air_mac;
extern volatile sig_atomic_t g_stop;
extern std::string g_stats;
extern uint32_t g_stations, g_associated; // infrastructure mode
extern std::vector<BerCfg> g_ber;         // per-link bit error rates

// air_ber.cc
void SetupBer(bool tap); // the error models of every node with a lossy incoming link

// air_io.cc
uint32_t NodeOfAirMac(Mac48Address a); // g_air_mac.size() if none
void ConnectNode(uint32_t i);          // traces of node i's Wi-Fi device
void AttachTap(Ptr<Node> node, uint32_t i);
void SetupWired(NodeContainer& nodes, uint32_t queue);
void StartFlows();
void WritePackets(); // the per-packet records of voice mode
std::vector<Ptr<WifiMacQueue>> Queues(uint32_t i);

void SendWifiFrom(uint32_t i, Ptr<Packet> p, Mac48Address dst, uint16_t proto); // counted
Ptr<Packet> VoicePacket(uint32_t flow, uint32_t seq); // voice mode: flow index, seq, padding

// air_cell.cc (the AP's downlink multiplexer in voice mode)
bool MuxDirective(const std::string& k, std::istringstream& s); // a `mux_*` line
bool MuxCheck(uint32_t ap);                                      // after parsing
bool MuxTake(uint32_t i, uint32_t flow, uint32_t seq, uint32_t next); // taken?
void MuxFrameReceived(uint32_t i, Ptr<const Packet> p);         // a group frame at i
void WriteMuxReport();

// air_agg.cc (the stations' uplink aggregation in voice mode: `agg_up`)
const uint32_t AGG_MARK = 0xffffffffu; // a bundle's flow index (its first 4 bytes)
bool AggDirective(const std::string& k, std::istringstream& s); // an `agg_up` line
bool AggCheck(uint32_t nodes);                                   // after parsing
bool AggTake(uint32_t i, uint32_t flow, uint32_t seq, uint32_t next); // held?
bool AggSplit(Ptr<const Packet> p, std::vector<std::pair<uint32_t, uint32_t>>& out); // a bundle?
void AggTxDone(uint32_t i); // node i's MPDU acked or dropped (agg_up_busy's release)
std::string AggJson(); // its counters (null without `agg_up`)

// air_edca.cc (the AP's voice access category: `ap_edca`)
bool EdcaDirective(const std::string& k, std::istringstream& s); // an `ap_edca` or `sta_be_edca` line
bool EdcaOn();
void EdcaConfigure(uint32_t ap, const std::vector<uint32_t>& stations); // after install
void EdcaTag(uint32_t i, Ptr<Packet> p); // node i's voice packet -> AC_VO if i is the AP
void EdcaTagDscp(uint32_t i, Ptr<Packet> p, uint16_t proto); // tap mode: the AC of its DSCP
std::string EdcaJson();                  // its counters (null without `ap_edca`)

// air_obs.cc
void StartProbe(bool realtime, const std::string& obs_dir, uint32_t obs_ms);
void WriteStats();
void FlushFiles(); // write what is pending and stop the file thread
std::string Report(const std::string& phy, bool tap, double sim, double wall, double cpu,
                   uint64_t events);
double WallSeconds();
double CpuSeconds();

} // namespace air
