-- Orders joined with the shipment events of the same order that happen within a window of
-- event time (from 1 minute before the order to 6 hours after it), then with the order's
-- customer and (if any) the customer's nation. Both orders and shipments are streams; the
-- window is the BETWEEN on their event times (docs/multiway.md, "Two streams in a window").
SELECT o.o_orderkey, o.o_ts AS ordered_at, s.s_ts AS shipped_at, s.s_carrier AS carrier,
       c.c_name AS customer, n.n_name AS nation
FROM orders o
  JOIN shipments s ON s.s_orderkey = o.o_orderkey
    AND s.s_ts BETWEEN o.o_ts - INTERVAL '1' MINUTE AND o.o_ts + INTERVAL '6' HOUR
  JOIN customer c ON c.c_custkey = o.o_custkey
  LEFT JOIN nation n ON n.n_nationkey = c.c_nationkey
