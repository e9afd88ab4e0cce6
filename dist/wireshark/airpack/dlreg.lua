-- airpack/dlreg.lua: downlink registration messages (docs/wire-format.md,
-- "Registration messages"; crates/core/src/downlink/register.rs).
--
-- The port is not fixed by the wire format: preference `airpack_dlreg.udp_port`,
-- 8889 by default (the AP's `registration_port` default on branch `ap`).
-- Shows version, type, key id, sequence number, the body of every type and
-- the tag (SipHash-2-4, shown, not verified: no key here); a message
-- register::decode refuses is named (`airpack_dlreg.error`: empty,
-- bad_version, truncated, reserved, zero_length, too_many_packets,
-- trailing_bytes), in its order of checks.
--
-- Loaded by ../airpack.lua; standalone: -X lua_script:dist/wireshark/airpack/dlreg.lua
-- _G: Wireshark runs each plugin file in its own environment; the guard is shared.
if _G.airpack_dlreg_loaded then return end
_G.airpack_dlreg_loaded = true

local p = Proto("airpack_dlreg", "airpack downlink registration")
p.prefs.udp_port = Pref.uint("UDP port", 8889, "registration port of the access point")

local TYPES = { [1] = "register", [2] = "renew", [3] = "unregister", [4] = "loss report", [0x81] = "register ok",
    [0x82] = "renew ok", [0x83] = "unregister ok", [0xff] = "error" }
local KINDS = { [1] = "single", [2] = "range", [3] = "auto" }
local CODES = { [1] = "bad request", [2] = "table full", [3] = "ports taken",
    [4] = "range too large", [5] = "no lease", [6] = "address mismatch" }

local f = {
    version = ProtoField.uint8("airpack_dlreg.version", "Version"),
    type = ProtoField.uint8("airpack_dlreg.type", "Type", base.HEX, TYPES),
    key_id = ProtoField.uint16("airpack_dlreg.key_id", "Key id"),
    seq = ProtoField.uint64("airpack_dlreg.seq", "Sequence number"),
    family = ProtoField.uint8("airpack_dlreg.family", "Address family"),
    addr4 = ProtoField.ipv4("airpack_dlreg.addr", "Station address"),
    addr6 = ProtoField.ipv6("airpack_dlreg.addr6", "Station address"),
    kind = ProtoField.uint8("airpack_dlreg.kind", "Ports", base.DEC, KINDS),
    first_port = ProtoField.uint16("airpack_dlreg.first_port", "First port"),
    last_port = ProtoField.uint16("airpack_dlreg.last_port", "Last port"),
    lease = ProtoField.uint16("airpack_dlreg.lease", "Lease (s)"),
    reply_to = ProtoField.uint64("airpack_dlreg.reply_to", "Reply to sequence number"),
    epoch = ProtoField.uint8("airpack_dlreg.epoch", "Epoch"),
    runs = ProtoField.uint8("airpack_dlreg.runs", "Runs"),
    run = ProtoField.bytes("airpack_dlreg.run", "Run"),
    run_port = ProtoField.uint16("airpack_dlreg.run.first_port", "First port"),
    run_count = ProtoField.uint16("airpack_dlreg.run.count", "Ports"),
    run_sid = ProtoField.uint16("airpack_dlreg.run.first_sid", "First stream id"),
    code = ProtoField.uint8("airpack_dlreg.code", "Error code", base.DEC, CODES),
    received = ProtoField.uint32("airpack_dlreg.received", "Frames received"),
    missed = ProtoField.uint32("airpack_dlreg.missed", "Frames missed"),
    unrecovered = ProtoField.uint32("airpack_dlreg.unrecovered", "Frames missed, not recovered"),
    tag = ProtoField.bytes("airpack_dlreg.tag", "Tag (SipHash-2-4, not verified here)"),
    error = ProtoField.string("airpack_dlreg.error", "Message refused"),
}
local fl = {}
for _, v in pairs(f) do fl[#fl + 1] = v end
p.fields = fl

local ex_refused = ProtoExpert.new("airpack_dlreg.refused", "Message refused",
    expert.group.MALFORMED, expert.severity.ERROR)
p.experts = { ex_refused }

local function fail(reason) error({ reason = reason }, 0) end
local function take(c, k)
    if c.n - c.o < k then fail("truncated") end
    local r = c.tvb(c.o, k)
    c.o = c.o + k
    return r
end

local function addr(c, t)
    local fam = take(c, 1)
    t:add(f.family, fam)
    if fam:uint() == 4 then
        t:add(f.addr4, take(c, 4))
    elseif fam:uint() == 6 then
        t:add(f.addr6, take(c, 16))
    else
        fail("reserved")
    end
end

local function answer(c, t)
    t:add(f.reply_to, take(c, 8))
    t:add(f.epoch, take(c, 1))
    t:add(f.lease, take(c, 2))
    local nr = take(c, 1)
    t:add(f.runs, nr)
    if nr:uint() > 8 then fail("too_many_packets") end
    for i = 1, nr:uint() do
        local r = take(c, 6)
        local rt = t:add(f.run, r)
        local port, count, sid = r(0, 2):uint(), r(2, 2):uint(), r(4, 2):uint()
        rt:set_text(string.format("Run %d: ports %d.. (%d) = stream ids %d..", i, port, count, sid))
        rt:add(f.run_port, r(0, 2))
        rt:add(f.run_count, r(2, 2))
        rt:add(f.run_sid, r(4, 2))
        if count == 0 then fail("zero_length") end
        if port + count - 1 > 0xffff or sid + count - 1 > 0x7fff then fail("reserved") end
    end
end

local function body(tvb, root)
    local n = tvb:len()
    if n == 0 then fail("empty") end
    root:add(f.version, tvb(0, 1))
    if tvb(0, 1):uint() ~= 1 then fail("bad_version") end
    if n < 20 then fail("truncated") end
    -- The body ends where the tag starts.
    local c = { tvb = tvb, o = 1, n = n - 8 }
    local ty = take(c, 1)
    root:add(f.type, ty)
    root:add(f.key_id, take(c, 2))
    root:add(f.seq, take(c, 8))
    root:add(f.tag, tvb(n - 8, 8))
    local t = ty:uint()
    if t == 1 then
        addr(c, root)
        local k = take(c, 1)
        root:add(f.kind, k)
        local first, last = take(c, 2), take(c, 2)
        root:add(f.first_port, first)
        root:add(f.last_port, last)
        local a, b = first:uint(), last:uint()
        local ok = (k:uint() == 1 and a == b) or (k:uint() == 2 and a <= b)
            or (k:uint() == 3 and a == 0 and b == 0)
        if not ok then fail("reserved") end
        root:add(f.lease, take(c, 2))
    elseif t == 2 then
        addr(c, root)
        root:add(f.lease, take(c, 2))
    elseif t == 3 then
        addr(c, root)
    elseif t == 4 then
        addr(c, root)
        root:add(f.received, take(c, 4))
        local m, u = take(c, 4), take(c, 4)
        root:add(f.missed, m)
        root:add(f.unrecovered, u)
        if u:uint() > m:uint() then fail("reserved") end
    elseif t == 0x81 or t == 0x82 then
        answer(c, root)
    elseif t == 0x83 then
        root:add(f.reply_to, take(c, 8))
    elseif t == 0xff then
        root:add(f.reply_to, take(c, 8))
        local code = take(c, 1)
        root:add(f.code, code)
        if CODES[code:uint()] == nil then fail("reserved") end
    else
        fail("reserved")
    end
    if c.o < c.n then fail("trailing_bytes") end
    return TYPES[t]
end

function p.dissector(tvb, pinfo, tree)
    pinfo.cols.protocol = "airpack dlreg"
    local root = tree:add(p, tvb(), "airpack downlink registration")
    local ok, res = pcall(body, tvb, root)
    local info = "airpack registration"
    if ok then
        info = info .. ": " .. res
    else
        if type(res) ~= "table" then error(res, 0) end
        root:add(f.error, res.reason)
        root:add_proto_expert_info(ex_refused, res.reason)
        info = info .. ", refused: " .. res.reason
    end
    pinfo.cols.info = info
    return tvb:len()
end

local current = 0
local function register_port()
    local udp = DissectorTable.get("udp.port")
    if current ~= 0 then udp:remove(current, p) end
    current = p.prefs.udp_port
    if current ~= 0 then udp:add(current, p) end
end
p.prefs_changed = register_port
register_port()
