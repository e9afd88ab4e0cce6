// airpack-ns3-air: the access point's voice access category (issue 14;
// `airpack lab cell-sim --ap-vo`). A WMM access point (hostapd's defaults)
// sends what is marked as voice on its AC_VO queue, which waits AIFSN 1
// slot after SIFS and draws its backoff from CWmin 3 .. CWmax 7, fewer
// slots than any station. With `ap_edca` every infrastructure node becomes
// a QoS node (ns-3 3.37's ApWifiMac serves QoS stations only, see below);
// every queue of every node but the AP's AC_VO keeps the access of the
// non-QoS DCF the cell has without the directive (AIFSN 2 = DIFS, the PHY's
// CWmin (31 DSSS, 15 OFDM), CWmax 1023, no TXOP), and the AP's AC_VO gets
// AIFSN / CWMIN / CWMAX / TXOP_US. Untagged frames go to AC_BE (TID 0); the
// AP's voice (its multiplexed frames, air_cell.cc, and the downlink packets
// it relays as unicast in voice mode) carries a SocketPriorityTag of 6
// (TID 6 -> AC_VO), as mac80211 would classify a DSCP EF packet.
//
// Why every node is QoS: ns-3 3.37's ApWifiMac::ForwardDown sends QoS data
// frames whenever the AP is a QoS AP ("an AP that supports QoS does not
// support non-QoS associations"), so a QoS AP with non-QoS stations is not
// a supported model. The stations take their EDCA parameters from the AP's
// beacons (StaWifiMac::UpdateApInfo), which advertise the AP's own per-AC
// values: hence the AP's AC_BE is set to the DCF values, and the stations'
// queues are set to them too (before the first beacon). The stations'
// AC_VO learns the AP's AC_VO values from the beacons, but stations send
// nothing on it (their frames are untagged). A QoS data frame carries a
// 2-byte QoS control field more than a non-QoS one: the only difference
// left against the non-QoS cell (checked by `--ap-vo-edca 2,CWMIN,1023,0`,
// the DCF values on AC_VO, docs/results.md).
//
// Tap mode (the real-time air): what the AP's kernel writes to its radio
// goes to the AC of its IP DSCP (EdcaTagDscp: EF -> UP 6 -> AC_VO, as
// mac80211 classifies), so the daemon's frames (ap.frame_dscp = 46) and EF
// voice relayed as unicast take AC_VO; `tagged` counts UP 6-7 there.
//
// Directive (air.cc's list):
//   ap_edca AIFSN CWMIN CWMAX TXOP_US [STA_AIFSN STA_CWMIN STA_CWMAX]
//                                       the AP's AC_VO; infrastructure mode; with the last
//                                       three the stations' AC_VO stays at them (hostapd's
//                                       advertised wmm_ac_vo_*) instead of the AP's values
//   sta_be_edca AIFSN CWMIN CWMAX       with ap_edca: the stations' AC_BE (where their
//                                       untagged voice goes) kept at these values, e.g.
//                                       WMM's AC_BE (3, 15, 1023: hostapd's advertised
//                                       wmm_ac_be_*) instead of the DCF's (2, CWmin, 1023)
//
// Must not touch: the scenario (air.cc), the relaying (air_io.cc calls
// EdcaTag), the multiplexer (air_cell.cc calls EdcaTag).

#include "air.h"

namespace air
{

namespace
{

struct EdcaCfg
{
    bool on = false;
    uint32_t aifsn = 1, cwmin = 3, cwmax = 7;
    uint64_t txop_us = 0;
    uint32_t ap = 0;
    std::vector<uint32_t> stations;
    uint64_t tagged = 0;          // AP packets tagged for AC_VO
    uint64_t vo = 0, be = 0;      // MPDUs enqueued at the AP's AC_VO / AC_BE
    uint64_t vo_mgt = 0;          // management frames enqueued at the AP's AC_VO
    uint64_t sta_vo = 0, sta_vo_mgt = 0; // MPDUs (management frames) at the stations' AC_VO
    // the stations' AC_VO kept at these values (AIFSN, CWmin, CWmax) after every beacon and
    // association, as hostapd advertises `wmm_ac_vo_*` apart from its own `tx_queue_data0_*`;
    // empty: the stations take the AP's AC_VO from its beacons (ns-3's EDCA parameter set)
    std::vector<uint32_t> sta_vo_edca;
    // the stations' AC_BE kept at these values likewise (`sta_be_edca`); empty: the DCF's
    std::vector<uint32_t> sta_be_edca;
} g_edca;
std::map<int, uint64_t> g_sta_rx_drop; // the first station's PHY drops, by reason

void StaRxDrop(Ptr<const Packet>, WifiPhyRxfailureReason r)
{
    g_sta_rx_drop[int(r)]++;
}

void CountVo(Ptr<const WifiMpdu> mpdu)
{
    g_edca.vo += mpdu->GetHeader().IsQosData() ? 1 : 0;
    g_edca.vo_mgt += mpdu->GetHeader().IsMgt() ? 1 : 0;
}

// Station i's AC_VO and AC_BE back at the advertised values, where given (after ns-3
// applied the AP's EDCA set).
void StaReset(uint32_t i)
{
    for (auto [ac, v] : {std::pair{AC_VO, &g_edca.sta_vo_edca}, std::pair{AC_BE, &g_edca.sta_be_edca}})
    {
        if (v->empty())
        {
            continue;
        }
        Ptr<QosTxop> q = g_wifi[i]->GetMac()->GetQosTxop(ac);
        q->SetAifsn((*v)[0]);
        q->SetMinCw((*v)[1]);
        q->SetMaxCw((*v)[2]);
    }
}

void StaBeacon(uint32_t i, Time)
{
    Simulator::ScheduleNow(&StaReset, i); // after the beacon's UpdateApInfo
}

void StaAssoc(uint32_t i, Mac48Address)
{
    Simulator::ScheduleNow(&StaReset, i); // after the association response's UpdateApInfo
}

// A station's AC_VO (which takes the AP's AC_VO values from its beacons): what it sends there.
void CountStaVo(Ptr<const WifiMpdu> mpdu)
{
    g_edca.sta_vo++;
    g_edca.sta_vo_mgt += mpdu->GetHeader().IsMgt() ? 1 : 0;
}

void CountBe(Ptr<const WifiMpdu> mpdu)
{
    g_edca.be += mpdu->GetHeader().IsQosData() ? 1 : 0;
}

// Every queue of `mac` at the non-QoS DCF's access (AIFSN 2, the PHY's
// CWmin as ns-3 set it for AC_BE, CWmax 1023, no TXOP).
void DcfAccess(Ptr<WifiMac> mac)
{
    const uint32_t cwmin = mac->GetQosTxop(AC_BE)->GetMinCw(0); // link 0: not MLD
    for (AcIndex ac : {AC_BE, AC_BK, AC_VI, AC_VO})
    {
        Ptr<QosTxop> q = mac->GetQosTxop(ac);
        q->SetAifsn(2);
        q->SetMinCw(cwmin);
        q->SetMaxCw(1023);
        q->SetTxopLimit(MicroSeconds(0));
    }
}

// A queue's access as the MAC holds it now: [AIFSN, CWmin, CWmax].
std::string Access(uint32_t node, AcIndex ac)
{
    Ptr<QosTxop> q = g_wifi[node]->GetMac()->GetQosTxop(ac);
    std::ostringstream o;
    o << "[" << uint32_t(q->GetAifsn(0)) << "," << q->GetMinCw(0) << "," << q->GetMaxCw(0) << "]";
    return o.str();
}

} // namespace

bool EdcaDirective(const std::string& k, std::istringstream& s)
{
    if (k == "sta_be_edca")
    {
        uint32_t a, lo, hi;
        bool ok = bool(s >> a >> lo >> hi) && a >= 1 && a <= 15 && lo <= hi && hi <= 32767;
        g_edca.sta_be_edca = {a, lo, hi};
        return ok;
    }
    if (k != "ap_edca")
    {
        return false;
    }
    g_edca.on = true;
    bool ok = bool(s >> g_edca.aifsn >> g_edca.cwmin >> g_edca.cwmax >> g_edca.txop_us) &&
              g_edca.aifsn >= 1 && g_edca.aifsn <= 15 && g_edca.cwmin <= g_edca.cwmax &&
              g_edca.cwmax <= 32767 && g_edca.txop_us <= 8160;
    uint32_t a, lo, hi;
    if (ok && s >> a >> lo >> hi)
    {
        g_edca.sta_vo_edca = {a, lo, hi};
        ok = a >= 1 && a <= 15 && lo <= hi && hi <= 32767;
    }
    return ok;
}

bool EdcaOn()
{
    return g_edca.on;
}

void EdcaConfigure(uint32_t ap, const std::vector<uint32_t>& stations)
{
    if (!g_edca.on)
    {
        if (!g_edca.sta_be_edca.empty())
        {
            std::fprintf(stderr, "airpack-ns3-air: sta_be_edca needs ap_edca\n");
            std::exit(2);
        }
        return;
    }
    g_edca.ap = ap;
    g_edca.stations = stations;
    for (uint32_t i : stations)
    {
        DcfAccess(g_wifi[i]->GetMac());
        g_wifi[i]->GetMac()->GetQosTxop(AC_VO)->GetWifiMacQueue()->TraceConnectWithoutContext(
            "Enqueue", MakeCallback(&CountStaVo));
        if (!g_edca.sta_vo_edca.empty() || !g_edca.sta_be_edca.empty())
        {
            StaReset(i);
            Ptr<WifiMac> m = g_wifi[i]->GetMac();
            if (!m->TraceConnectWithoutContext("BeaconArrival", MakeBoundCallback(&StaBeacon, i)) ||
                !m->TraceConnectWithoutContext("Assoc", MakeBoundCallback(&StaAssoc, i)))
            {
                std::fprintf(stderr, "airpack-ns3-air: no beacon/assoc trace at node %u\n", i);
                std::exit(2);
            }
        }
    }
    if (!stations.empty())
    {
        g_wifi[stations[0]]->GetPhy()->TraceConnectWithoutContext("PhyRxDrop",
                                                                   MakeCallback(&StaRxDrop));
    }
    Ptr<WifiMac> mac = g_wifi[ap]->GetMac();
    DcfAccess(mac);
    Ptr<QosTxop> vo = mac->GetQosTxop(AC_VO);
    vo->SetAifsn(g_edca.aifsn);
    vo->SetMinCw(g_edca.cwmin);
    vo->SetMaxCw(g_edca.cwmax);
    vo->SetTxopLimit(MicroSeconds(g_edca.txop_us));
    vo->GetWifiMacQueue()->TraceConnectWithoutContext("Enqueue", MakeCallback(&CountVo));
    mac->GetQosTxop(AC_BE)->GetWifiMacQueue()->TraceConnectWithoutContext(
        "Enqueue", MakeCallback(&CountBe));
}

void EdcaTag(uint32_t i, Ptr<Packet> p)
{
    if (!g_edca.on || i != g_edca.ap)
    {
        return;
    }
    SocketPriorityTag tag;
    tag.SetPriority(6);
    p->ReplacePacketTag(tag);
    g_edca.tagged++;
}

// RFC 8325's DSCP -> 802.11 user priority, as mac80211's
// cfg80211_classify8021d maps it (crates/airpack/src/linux/wmm.rs).
uint8_t UserPriority(uint8_t dscp)
{
    switch (dscp & 0x3f)
    {
    case 10: case 12: case 14: case 16: return 0;
    case 18: case 20: case 22: return 3;
    case 24: case 26: case 28: case 30: return 4;
    case 44: case 46: return 6;
    case 48: return 7;
    default: return (dscp & 0x3f) >> 3;
    }
}

void EdcaTagDscp(uint32_t i, Ptr<Packet> p, uint16_t proto)
{
    uint8_t h[2];
    if (!g_edca.on || i != g_edca.ap || p->GetSize() < 2 || p->CopyData(h, 2) != 2)
    {
        return;
    }
    uint8_t tos;
    if (proto == 0x0800 && h[0] >> 4 == 4)
    {
        tos = h[1];
    }
    else if (proto == 0x86DD && h[0] >> 4 == 6)
    {
        tos = uint8_t((h[0] & 0x0f) << 4 | h[1] >> 4);
    }
    else
    {
        return;
    }
    SocketPriorityTag tag;
    tag.SetPriority(UserPriority(tos >> 2));
    p->ReplacePacketTag(tag);
    g_edca.tagged += tag.GetPriority() >= 6 ? 1 : 0;
}

std::string EdcaJson()
{
    if (!g_edca.on)
    {
        return "null";
    }
    std::ostringstream o;
    o << "{\"aifsn\":" << g_edca.aifsn << ",\"cwmin\":" << g_edca.cwmin << ",\"cwmax\":" << g_edca.cwmax
      << ",\"txop_us\":" << g_edca.txop_us << ",\"tagged\":" << g_edca.tagged
      << ",\"ap_vo_mpdus\":" << g_edca.vo << ",\"ap_be_mpdus\":" << g_edca.be
      << ",\"ap_vo_mgt\":" << g_edca.vo_mgt << ",\"sta_vo_mpdus\":" << g_edca.sta_vo
      << ",\"sta_vo_mgt\":" << g_edca.sta_vo_mgt
      << ",\"ap_vo_access\":" << Access(g_edca.ap, AC_VO)
      << ",\"ap_be_access\":" << Access(g_edca.ap, AC_BE);
    // the stations' access at the end, after the AP's beacons (UpdateApInfo)
    if (!g_edca.stations.empty())
    {
        o << ",\"sta_be_access\":" << Access(g_edca.stations[0], AC_BE)
          << ",\"sta_vo_access\":" << Access(g_edca.stations[0], AC_VO);
    }
    o << ",\"sta_rx_drop\":{";
    bool first = true;
    for (auto& [r, n] : g_sta_rx_drop)
    {
        std::ostringstream name;
        name << WifiPhyRxfailureReason(r);
        o << (first ? "" : ",") << "\"" << name.str() << "\":" << n;
        first = false;
    }
    o << "}}";
    return o.str();
}

} // namespace air
