"""What this process gets from the machine, and the processes it starts: cgroup
limits, CPU features and threads, the memory budget, freeing memory, the cost of a process
tree, worker processes spoken to in JSON lines, and converters' native output kept quiet.
"""
