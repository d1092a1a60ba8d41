import { fakeTarget } from '../helpers/kube-target.ts';
import { lbaasScenarios } from './lbaas-scenarios.ts';

lbaasScenarios('fake API server + fake Neutron', () => fakeTarget());
