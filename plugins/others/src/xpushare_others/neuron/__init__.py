"""AWS Neuron devices (Inferentia, Trainium): the Neuron driver's sysfs; whole devices in
contiguous blocks by instance type, or NeuronCores by core bitmask (``awsneuron``)."""
