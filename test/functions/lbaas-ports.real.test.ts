import { realTarget } from '../helpers/kube-target.ts';
import { lbaasScenarios } from './lbaas-scenarios.ts';

lbaasScenarios('real kube-apiserver + fake Neutron', realTarget);
