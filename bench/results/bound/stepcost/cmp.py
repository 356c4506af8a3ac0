import json, sys
a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
names = ['ssbj', 'meshjoin', 'meshjoin_same_w']
keys = list(a['ssbj']['per_step_us'])
print('%-30s' % '', *['%9s %9s' % (n[:9] + ' A', 'B') for n in names])
print('%-30s' % 'cpu c_loop', *['%9.0f %9.0f' % (a[n]['unwrapped_cpu_c_loop_us'], b[n]['unwrapped_cpu_c_loop_us']) for n in names])
for k in keys:
    print('%-30s' % k, *['%9.1f %9.1f' % (a[n]['per_step_us'].get(k, 0), b[n]['per_step_us'].get(k, 0)) for n in names])
print(a['load_start'], a['load_end'], b['load_start'], b['load_end'])
