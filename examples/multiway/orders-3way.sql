-- Orders enriched with their customer, the customer's nation and (if any) the part ordered.
-- Inner joins drop orders without a customer (or a customer without a nation); the LEFT JOIN
-- keeps orders whose part is unknown, with NULL part columns. Supported SQL: docs/sql.md.
SELECT o.o_orderkey, o.o_orderdate, o.o_totalprice,
       c.c_name AS customer, c.c_mktsegment AS segment,
       n.n_name AS nation,
       p.p_name AS part
FROM orders o
  JOIN customer c ON c.c_custkey = o.o_custkey
  JOIN nation n ON n.n_nationkey = c.c_nationkey
  LEFT JOIN part p ON p.p_partkey = o.o_partkey AND p.p_size > 3
WHERE o.o_totalprice >= 1000
