/* base.c - the base policy: nothing of its own. The driver's reactive faults and evictions place
 * the data; in limit mode the services (limit.c) still keep L. */
#include "ops.h"

const transit_policy_ops transit_policy_base_ops = {0};
